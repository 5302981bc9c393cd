"""``openbook export RUN --format transformers``: a trained run as a transformers RAG model with the same loss.

Tiny random BART / T5 generators and BERT / DPR query encoders are trained for two steps with the CLI,
exported, loaded with ``RagSequenceForGeneration`` / ``RagTokenForGeneration.from_pretrained`` and
compared with openbook on the same questions, answers and retrieved documents: the exported question
encoder's scores d(z)^T q(x) equal openbook's scaled scores (the score scale is folded into it), and
transformers' loss equals openbook's. Answers have several tokens: transformers' RAG-Sequence loss drops
the retriever prior for a one-token target (see the README).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoTokenizer, RagSequenceForGeneration, RagTokenForGeneration

from openbook.cli import main
from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.models import load_encoder
from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base, load_rag, load_run
from openbook.train.export import EXPORT_NOTE, export_transformers
from tiny import PASSAGES, bart_tokenizer, t5_tokenizer, tiny_bart, tiny_encoder, tiny_t5
from tiny_encoders import save_bert, save_dpr
from tolerance import model_tolerance

EPS = torch.finfo(torch.float32).eps
QUESTIONS = ["who wrote the sun also rises", "capital of france", "largest ocean"]
ANSWERS = ["ernest hemingway", "paris france", "the pacific ocean"]  # several tokens each (see the docstring)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Generator and encoder folders, and a knowledge base per encoder."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    tok = bart_tokenizer()
    tiny_bart(vocab_size=len(tok), seed=11, init_std=0.05, d_model=32).save_pretrained(root / "bart")
    tok.save_pretrained(root / "bart")
    tok = t5_tokenizer()
    t5 = tiny_t5(vocab_size=len(tok))
    del t5.config.bos_token_id  # as a T5 checkpoint saved by transformers 5 has none
    t5.save_pretrained(root / "t5")
    tok.save_pretrained(root / "t5")
    out["bart"], out["t5"] = root / "bart", root / "t5"
    for name, folder in (("bert", save_bert(root / "bert")), ("dpr", save_dpr(root / "dpr")),
                         ("dpr-proj", save_dpr(root / "dpr-proj", projection_dim=8))):
        out[name] = folder
        build_knowledge_base(PASSAGES, load_encoder(str(folder)), root / f"kb-{name}", progress=False)
        out[f"kb-{name}"] = root / f"kb-{name}"
    data = root / "train.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answers": [a]}) for q, a in zip(QUESTIONS, ANSWERS)))
    out["data"] = data
    return out


def train_and_export(folders, tmp_path, generator, encoder, model, *extra):
    run, out = tmp_path / "run", tmp_path / "exported"
    assert main(["train", "--model", model, "--train", str(folders["data"]), "--kb", str(folders[f"kb-{encoder}"]),
                 "--out", str(run), "--generator", str(folders[generator]), "--encoder", str(folders[encoder]),
                 "--k", "2", "--max-steps", "2", "--batch-size", "2", "--lr-generator", "1e-2",
                 "--lr-query-encoder", "1e-2", *extra]) == 0
    assert main(["export", str(run), "--format", "transformers", "--out", str(out)]) == 0
    return run, out


CASES = [  # generator, query encoder, model, extra training options
    ("bart", "bert", "rag-sequence", ("--learn-scale", "--label-smoothing", "0.1")),
    ("bart", "dpr", "rag-token", ()),
    ("t5", "dpr-proj", "rag-sequence", ("--learn-scale",)),
    ("t5", "bert", "rag-token", ("--learn-scale",)),
    ("bart", "dpr", "rag-sequence", ("--lora", "4", "--freeze-retriever")),  # adapters folded into BART's weights
]


@pytest.mark.parametrize("generator, encoder, model, extra", CASES)
def test_exported_run_gives_the_same_loss_in_transformers(folders, tmp_path, capsys, generator, encoder, model, extra):
    run, out = train_and_export(folders, tmp_path, generator, encoder, model, *extra)
    assert "from_pretrained" in capsys.readouterr().out.strip().splitlines()[-1]
    cls = RagTokenForGeneration if model == "rag-token" else RagSequenceForGeneration
    hf = cls.from_pretrained(out).eval()
    assert hf.config.n_docs == 2 and hf.config.generator.model_type == generator
    ours = load_run(run)
    eps_smooth = hf.config.label_smoothing
    assert eps_smooth == (0.1 if "--label-smoothing" in extra else 0.0)
    q_tok = AutoTokenizer.from_pretrained(out, subfolder="question_encoder_tokenizer")
    with torch.no_grad():
        retrieval = ours.retrieve(QUESTIONS, 2)
        q = q_tok(QUESTIONS, return_tensors="pt", padding=True)
        q_vectors = hf.rag.question_encoder(q["input_ids"], attention_mask=q["attention_mask"])[0]
        docs = torch.from_numpy(ours.kb.embeddings[retrieval.ids]).float()
        scores = torch.einsum("bkd,bd->bk", docs, q_vectors)
        expected = retrieval.scores * ours.score_scale
        # the folded scale multiplies the last LayerNorm/projection (a few roundings per element), then a
        # length-d dot product: |error| <= (d + 3) eps sum_i |q_i d_i| (the standard dot-product bound)
        bound = (docs.shape[-1] + 3) * EPS * torch.einsum("bkd,bd->bk", docs.abs(), q_vectors.abs())
        assert ((scores - expected).abs() <= bound).all(), (scores, expected, bound)

        ctx = ours.generator.contexts(QUESTIONS, retrieval.passages)
        targets, _mask = ours.generator.encode_targets(ANSWERS, 64)
        labels = torch.cat([torch.full((len(QUESTIONS), 1), ours.generator.start_token_id), targets], 1)
        theirs = hf(context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask, doc_scores=scores,
                    labels=labels, n_docs=2).loss.mean()
        mine = ours.loss(QUESTIONS, ANSWERS, k=2, epsilon=eps_smooth)
        logits = ours.generator.target_logits(ours.generator.encode(ctx), torch.arange(len(ctx.input_ids)),
                                              targets.repeat_interleave(2, 0))
    # each loss is a sum over T target positions of log-softmaxes of length-H dot products (logits), plus
    # the log prior from the scores: an error of at most ~sqrt(H) eps |logit| per logit, doubled by the
    # log-softmax, per layer the activations went through, and the score error above.
    H = hf.config.generator.d_model
    layers = hf.config.generator.num_layers if generator == "t5" else hf.config.generator.decoder_layers
    tolerance = 2 * EPS * math.sqrt(H) * (layers + 1) * targets.shape[1] * float(logits.abs().max()) \
        + 2 * float(bound.max()) + EPS * abs(float(mine))
    assert abs(float(theirs) - float(mine)) <= tolerance, (float(theirs), float(mine), tolerance)


def test_export_round_trips_through_openbooks_importer(folders, tmp_path, capsys):
    """openbook imports its own export (transformers' layout) and gives the same loss: p(z|x) and the generator
    survive, the score scale folded into the question encoder."""
    run, out = train_and_export(folders, tmp_path, "bart", "bert", "rag-sequence", "--learn-scale")
    ours = load_run(run)
    imported = load_rag(generator=str(out), kb=KnowledgeBase.load(folders["kb-bert"]), k=2)
    assert imported.model_type == "rag-sequence" and float(imported.score_scale) == 1.0
    with torch.no_grad():
        a, b = ours.retrieve(QUESTIONS, 2), imported.retrieve(QUESTIONS, 2)
        assert (a.ids == b.ids).all()
        # the same q(x) network, the score scale folded into its last linear map: equal up to its rounding
        torch.testing.assert_close(b.doc_logprobs, a.doc_logprobs,
                                   **model_tolerance(a.doc_logprobs, ours.query_encoder.model.config, 32))
        # An imported transformers checkpoint reads questions and targets as transformers does (the question
        # round-tripped through the question-encoder tokenizer, targets led by <s>: see hf_rag.py), so its
        # loss is transformers'; with openbook's own conventions restored, the weights give openbook's loss.
        gen = imported.generator
        assert gen.question_tokenizer is not None and gen.training_start_token_id is not None
        gen.question_tokenizer, gen.training_start_token_id = None, None
        mine, theirs = float(ours.loss(QUESTIONS, ANSWERS, k=2)), float(imported.loss(QUESTIONS, ANSWERS, k=2))
    assert mine == pytest.approx(theirs, abs=model_tolerance(mine, ours.generator.model.config, 32)["atol"])


def test_what_transformers_cannot_express_is_refused(folders, tmp_path, capsys):
    # closed-book: no retriever
    run = tmp_path / "closed"
    assert main(["train", "--model", "closed-book", "--train", str(folders["data"]), "--out", str(run),
                 "--generator", str(folders["bart"]), "--max-steps", "1", "--batch-size", "2"]) == 0
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("openbook: error:") and "closed-book" in err and "\n" not in err
    assert not (tmp_path / "x").exists()
    kb = KnowledgeBase.load(folders["kb-bert"])
    bert = load_encoder(str(folders["bert"]))
    # a causal-LM generator
    from tiny_causal import make_generator

    causal = RAG(bert, make_generator(), kb, k=2)
    with pytest.raises(InputError, match="causal-LM run cannot be expressed"):
        export_transformers(causal, tmp_path / "y")
    # L2-normalised (mean-pooled) query vectors, like the default MiniLM encoder
    tok = bart_tokenizer()
    bart = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok)), tok)
    minilm_like = tiny_encoder()
    normalized = RAG(minilm_like, bart, build_knowledge_base(PASSAGES, minilm_like, tmp_path / "kb", progress=False))
    with pytest.raises(InputError, match="L2-normalises"):
        export_transformers(normalized, tmp_path / "y")
    with pytest.raises(InputError, match="no dense retriever"):
        export_transformers(RAG(bert, bart, kb, retriever="bm25"), tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_export_never_replaces_a_folder_that_is_not_an_export(folders, tmp_path, capsys):
    run, out = train_and_export(folders, tmp_path, "bart", "dpr", "rag-token")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    capsys.readouterr()
    for force in ([], ["--force"]):
        assert main(["export", str(run), "--out", str(mine), *force]) == 2
        assert (mine / "notes.txt").read_text() == "keep me"
    assert "not empty" in capsys.readouterr().err
    with pytest.raises(InputError, match="not an openbook export"):  # the Python API is as careful
        export_transformers(load_run(run), mine, force=True)
    assert (mine / "notes.txt").read_text() == "keep me"
    assert main(["export", str(run), "--out", str(out)]) == 2  # an earlier export: only with --force
    assert main(["export", str(run), "--out", str(out), "--force", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["class"] == "RagTokenForGeneration" and report["run"] == str(run.resolve())
    assert (out / EXPORT_NOTE).is_file() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_export_force_keeps_files_the_export_did_not_write(folders, tmp_path, capsys):
    run, out = train_and_export(folders, tmp_path, "bart", "dpr", "rag-token")
    (out / "README.md").write_text("my notes")
    (out / "results").mkdir()
    (out / "results" / "dev.json").write_text("{}")
    (out / "generator_tokenizer" / "mine.txt").write_text("mine")
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "did not write (README.md, generator_tokenizer/mine.txt, results)" in err and err.count("\n") == 1
    assert (out / "README.md").read_text() == "my notes" and (out / "results" / "dev.json").is_file()
    assert (out / "generator_tokenizer" / "mine.txt").is_file()
    for extra in ("README.md", "results/dev.json", "results", "generator_tokenizer/mine.txt"):
        (out / extra).rmdir() if (out / extra).is_dir() else (out / extra).unlink()
    assert main(["export", str(run), "--out", str(out), "--force"]) == 0  # only its own files: replaced
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    note = json.loads((out / EXPORT_NOTE).read_text())
    del note["files"]  # as an export by an older openbook: its own files cannot be told from others
    (out / EXPORT_NOTE).write_text(json.dumps(note))
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(out), "--force"]) == 2
    assert "does not list the files" in capsys.readouterr().err and (out / "config.json").is_file()
