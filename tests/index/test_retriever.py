"""The one retrieval seam (openbook/index/retriever.py): k checked once, p(z|x) by one function, every
retriever behind one interface, and the bounds that keep `ask --k 100000` from running away."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from openbook import cli
from openbook.errors import MAX_K, InputError, check_k, positive_int
from openbook.index.retriever import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    PinnedRetriever,
    Retriever,
    fit_k,
    make_retriever,
    retrieval_logprobs,
)
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from openbook.rag.closed_book import ClosedBook
from tiny import PASSAGES, tiny_parts
from tolerance import probability_sum_bound


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return tiny_parts(tmp_path_factory.mktemp("kb"))


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory, parts):
    """The tiny generator saved as a folder, and a knowledge base built with a saved tiny encoder."""
    from openbook.models import load_encoder

    root = tmp_path_factory.mktemp("models")
    encoder, _, generator = parts
    generator.model.save_pretrained(root / "gen")
    generator.tokenizer.save_pretrained(root / "gen")
    encoder.model.save_pretrained(root / "enc")
    encoder.tokenizer.save_pretrained(root / "enc")
    build_knowledge_base(PASSAGES, load_encoder(str(root / "enc")), root / "kb", progress=False)
    return root / "gen", root / "kb"

# ---------------------------------------------------------------------------------------------------
# k and the positive-integer check


def k_message(k) -> str:
    return f"k (passages per question) must be a whole number from 1 to {MAX_K}, got {k!r}"


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "5", None, MAX_K + 1, 100000])
def test_k_must_be_a_whole_number_from_1_to_max_k(bad):
    with pytest.raises(InputError) as error:
        check_k(bad)
    assert str(error.value) == k_message(bad)


def test_k_is_bounded_and_clamped_to_the_live_passages():
    assert check_k(np.int64(7)) == 7 and check_k(MAX_K) == MAX_K and check_k(1) == 1
    with pytest.warns(UserWarning, match="k=50 is larger than the knowledge base \\(46 passages\\); using k=46"):
        assert fit_k(50, available=46) == 46


@pytest.mark.parametrize("k", [0, MAX_K + 1])
def test_every_entry_refuses_a_bad_k_with_the_one_message(tmp_path, capsys, k):
    """The command line (argparse type), the API (the request models: 422 naming k) and Python (RAG(k=),
    RAG.retrieve, RAG.ask) refuse k=0 and k=MAX_K+1 with openbook.errors.check_k's message."""
    from openbook.serve.app import create_app
    from serve_helpers import client, config, run, tiny_rag

    message = k_message(k)
    rag, encoder = tiny_rag(tmp_path)
    for call in (lambda: RAG(rag.query_encoder, rag.generator, rag.kb, k=k), lambda: rag.retrieve(["q"], k=k),
                 lambda: rag.ask(["q"], k=k, num_beams=1, max_new_tokens=2)):
        with pytest.raises(InputError) as error:
            call()
        assert str(error.value) == message
    for command in (["retrieve", "q"], ["ask", "q"]):
        assert cli.main(command + ["--kb", str(tmp_path / "kbs" / "main"), "--k", str(k)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.endswith(f" error: argument --k: {message}\n"), err

    async def go():
        async with client(create_app(config(tmp_path, encoder), rag=rag)) as http:
            for path in ("/v1/ask", "/v1/retrieve"):
                r = await http.post(path, json={"question": "q", "k": k})
                assert r.status_code == 422 and r.json()["error"] == {"message": f"k: {message}", "field": "k"}, r.text

    run(go())


def test_positive_int_names_what_is_wrong():
    assert positive_int(np.int32(3), "n") == 3
    for bad in (0, False, 1.0, "1"):
        with pytest.raises(InputError, match="^batch_size must be a positive integer, got"):
            positive_int(bad, "batch_size")


# ---------------------------------------------------------------------------------------------------
# p(z|x)


def test_retrieval_logprobs_is_the_scaled_softmax_for_arrays_and_tensors():
    scores = np.array([[0.5, 0.25, -1.0]], dtype=np.float32)
    expected = torch.log_softmax(torch.tensor(scores) * 20.0, dim=-1)
    torch.testing.assert_close(retrieval_logprobs(scores, 20.0), expected)
    tensor = torch.tensor(scores, requires_grad=True)
    scale = torch.tensor(20.0, requires_grad=True)
    retrieval_logprobs(tensor, scale)[0, 0].backward()
    assert tensor.grad is not None and scale.grad is not None


def test_dense_retriever_scores_are_differentiable_wrt_the_query_encoder(parts):
    encoder, kb, _ = parts
    hits = DenseRetriever(kb, encoder).retrieve(["capital of france"], 3)
    assert hits.scores.requires_grad and hits.ids.shape == (1, 3)
    retrieval_logprobs(hits.scores, 20.0)[0, 0].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())
    encoder.zero_grad()
    # with numpy query vectors (no torch encoder): the index's own scores, the same rows
    plain = DenseRetriever(kb, encoder.encode_queries).retrieve(["capital of france"], 3)
    assert plain.ids.tolist() == hits.ids.tolist()
    # float32 inner products of 16-d unit vectors: error a few eps
    np.testing.assert_allclose(plain.scores, hits.scores.detach().numpy(), atol=16 * 4 * np.finfo(np.float32).eps)



def test_a_pinned_retriever_reads_its_questions_from_memory_and_asks_its_inner_one_otherwise(parts):
    encoder, kb, _ = parts
    inner = DenseRetriever(kb, encoder.encode_queries)
    pinned = PinnedRetriever(inner, ["capital of france", "largest ocean", "capital of france"], 3, batch_size=1)
    asked = []
    inner.search = lambda questions, k, where=None: asked.append((list(questions), k)) or DenseRetriever.search(
        inner, questions, k, where)
    hits = pinned.retrieve(["largest ocean", "capital of france"], 3)
    assert asked == []  # read from memory, as the inner retriever found them
    fresh = DenseRetriever(kb, encoder.encode_queries).retrieve(["largest ocean", "capital of france"], 3)
    assert hits.ids.tolist() == fresh.ids.tolist() and hits.passages == fresh.passages
    np.testing.assert_array_equal(hits.scores, fresh.scores)
    pinned.retrieve(["largest mountain"], 3)  # not pinned
    pinned.retrieve(["largest ocean"], 2)  # another k
    assert asked == [(["largest mountain"], 3), (["largest ocean"], 2)]
    pinned.release_index()  # the knowledge base reads its index again when it is next needed
    assert pinned.retrieve(["largest mountain"], 3).ids.tolist() == fresh_ids(kb, encoder, "largest mountain")


def fresh_ids(kb, encoder, question: str) -> list:
    return DenseRetriever(kb, encoder.encode_queries).retrieve([question], 3).ids.tolist()


def test_rank_fusion_reads_dense_ids_without_a_graph_through_the_query_encoder(parts):
    """Hybrid retrieval only needs the dense ranking: search_ids gives search's rows, with no autograd."""
    encoder, kb, _ = parts
    dense = DenseRetriever(kb, encoder)
    questions = ["capital of france", "largest planet"]
    scores, ids = dense.search(questions, 3)
    assert scores.requires_grad and dense.search_ids(questions, 3).tolist() == np.asarray(ids).tolist()
    calls = []

    def encode(qs):
        calls.append(torch.is_grad_enabled())
        return encoder(qs)

    DenseRetriever(kb, encode).search_ids(questions, 3)
    assert calls == [False]

# ---------------------------------------------------------------------------------------------------
# one interface: RAG with every retriever, and with a new one


@pytest.mark.parametrize("name", ["dense", "bm25", "hybrid"])
def test_rag_retrieves_through_each_retriever(parts, name):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=3, score_scale=20.0, retriever=name)
    assert rag.retriever.name == name
    r = rag.retrieve(["capital of france"])
    assert r.ids.shape == (1, 3) and len(r.passages[0]) == 3
    scale = 20.0 if name == "dense" else 1.0  # BM25 and fused scores are the logits themselves
    torch.testing.assert_close(r.doc_logprobs, torch.log_softmax(r.scores.float() * scale, -1))
    if name == "bm25":
        assert r.passages[0][0].id == "p0"  # "capital of france" shares its words with p0 only


class EveryOtherRow(Retriever):
    """A toy stand-in for a sharded or remote retriever: any subclass with ``search`` plugs in (this one
    keeps no metadata, so it takes ``where`` and ignores it)."""

    name = "toy"
    scaled = False

    def search(self, questions, k, where=None):
        ids = np.tile(np.arange(0, 2 * k, 2) % len(self.kb), (len(questions), 1))
        return np.linspace(1.0, 0.0, k, dtype=np.float32)[None].repeat(len(questions), 0), ids


def test_a_new_retriever_plugs_into_rag_without_touching_it(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=2, retriever=EveryOtherRow(kb))
    (answer,) = rag.ask(["capital of france"], num_beams=1, max_new_tokens=2)
    assert [p.id for p in answer.passages] == ["p0", "p2"]
    assert abs(sum(p.prob for p in answer.passages) - 1.0) <= probability_sum_bound(2)


class TellMeTheFilter:
    """A knowledge base whose ``search`` insists on being told ``where``, even when it is None."""

    def __init__(self, inner):
        self.inner, self.told = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __len__(self):
        return len(self.inner)

    def search(self, questions, k, *, where):
        self.told.append(where)
        return self.inner.search(questions, k, where=where)


def test_every_retriever_and_knowledge_base_search_takes_where_none(parts):
    """One interface, as ParlAI's one abstract retriever: every search takes ``where=None``, and every caller
    passes it, filter or not (no caller picks its keyword arguments by whether a filter was given)."""
    import inspect

    from openbook.index.kb import KnowledgeBase
    from openbook.index.protocol import KnowledgeBaseLike
    from openbook.index.sharded import ShardedKnowledgeBase

    for cls in [Retriever, DenseRetriever, BM25Retriever, HybridRetriever, KnowledgeBase, ShardedKnowledgeBase,
                KnowledgeBaseLike]:
        where = inspect.signature(cls.search).parameters.get("where")
        assert where is not None and where.default is None, cls.__name__
    encoder, kb, generator = parts
    told = TellMeTheFilter(kb)
    DenseRetriever(told, encoder).retrieve(["capital of france"], 2)
    DenseRetriever(told, encoder.encode_queries).retrieve(["capital of france"], 2)
    DenseRetriever(told, encoder).search_ids(["capital of france"], 2)
    assert told.told == [None, None, None]

    class Toy(EveryOtherRow):
        told: list = []

        def search(self, questions, k, *, where):
            self.told.append(where)
            return super().search(questions, k, where=where)

    toy = Toy(kb)
    rag = RAG(encoder, generator, kb, k=2, retriever=toy)
    rag.retrieve(["capital of france"])
    HybridRetriever(kb, [toy, BM25Retriever(kb, progress=False)]).retrieve(["capital of france"], 2)
    assert toy.told == [None, None]


def test_use_knowledge_base_swaps_the_retrievers_index(parts, tmp_path):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=1, retriever="hybrid")
    other = build_knowledge_base(PASSAGES[:2], encoder, tmp_path / "small", progress=False)
    rag.use_knowledge_base(other)
    assert all(r.kb is other for r in [rag.retriever, *rag.retriever.retrievers])
    with pytest.warns(UserWarning, match="using k=2"):
        assert rag.retrieve(["capital of france"], k=5).ids.shape == (1, 2)


def test_make_retriever_names_and_needs(parts):
    _, kb, _ = parts
    assert isinstance(make_retriever("bm25", kb), BM25Retriever)
    assert isinstance(make_retriever("hybrid", kb, encode=lambda q: np.zeros((len(q), kb.dim))), HybridRetriever)
    with pytest.raises(InputError, match="needs a query encoder"):
        make_retriever("dense", kb)
    with pytest.raises(InputError, match="retriever must be one of dense, bm25, hybrid"):
        make_retriever("tfidf", kb)


# ---------------------------------------------------------------------------------------------------
# the finding: `ask --k 100000` on a small knowledge base; options accepted silently


def test_ask_with_a_huge_k_is_refused_and_a_large_one_reads_only_the_live_passages(parts):
    encoder, kb, generator = parts
    rag = RAG(encoder, generator, kb, k=2)
    with pytest.raises(InputError, match=f"from 1 to {MAX_K}, got 100000"):
        rag.ask(["capital of france"], k=100000)
    with pytest.raises(InputError, match=f"from 1 to {MAX_K}, got 100000"):
        RAG(encoder, generator, kb, k=100000)
    seen = []
    contexts = generator.contexts

    def counting(questions, passages):
        seen.append([len(row) for row in passages])
        return contexts(questions, passages)

    generator.contexts = counting
    try:
        with pytest.warns(UserWarning, match=f"using k={len(PASSAGES)}"):
            (answer,) = rag.ask(["capital of france"], k=MAX_K, num_beams=1, max_new_tokens=2, decoding="thorough")
    finally:
        del generator.contexts
    assert seen == [[len(PASSAGES)]] and len(answer.passages) == len(PASSAGES)


@pytest.mark.parametrize("options,message", [
    ({"min_new_tokens": 5, "max_new_tokens": 4}, r"min_new_tokens \(5\) must not exceed max_new_tokens \(4\)"),
    ({"length_penalty": float("nan")}, "length_penalty must be a finite number, got nan"),
    ({"length_penalty": float("inf")}, "length_penalty must be a finite number, got inf"),
    ({"min_new_tokens": -1}, "min_new_tokens must be a positive integer"),
    ({"num_beams": 0}, "num_beams must be a positive integer"),
    ({"num_beams": 100_000}, "num_beams must be at most 64, got 100000"),
    ({"max_new_tokens": 10**9}, "max_new_tokens must be at most 1024, got 1000000000"),
])
def test_ask_refuses_inconsistent_decoding_options(parts, options, message):
    encoder, kb, generator = parts
    for model in (RAG(encoder, generator, kb, k=2), ClosedBook(generator)):
        with pytest.raises(InputError, match=message):
            model.ask(["capital of france"], **options)


def test_ask_takes_numpy_numbers_for_its_options(parts):
    encoder, kb, generator = parts
    (answer,) = RAG(encoder, generator, kb, k=2).ask(["capital of france"], num_beams=np.int64(2),
                                                      max_new_tokens=np.int64(2), length_penalty=np.float32(1.0))
    assert isinstance(answer.answer, str)


def test_cli_ask_k_and_decoding_errors_are_one_line(saved_models, capsys):
    gen_dir, kb_dir = saved_models
    base = ["ask", "capital of france", "--kb", str(kb_dir), "--generator", str(gen_dir), "--beams", "1",
            "--max-new-tokens", "2"]
    for extra, message in (  # refused by the options' argparse types, before anything loads
        (["--k", "100000"], f"argument --k: {k_message(100000)}"),
        (["--length-penalty", "nan"], "argument --length-penalty: must be a finite number, got 'nan'"),
    ):
        assert cli.main(base + extra) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.endswith(f"openbook ask: error: {message}\n"), err
    assert cli.main(base + ["--min-new-tokens", "3"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "openbook: error: min_new_tokens (3) must not exceed max_new_tokens (2)\n"
    assert cli.main(base + ["--k", "50", "--retriever", "bm25", "--json"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert len(record["passages"]) == 6 and "using k=6" in err  # the encoder came from the knowledge base
