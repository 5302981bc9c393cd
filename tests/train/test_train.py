"""End-to-end training on tiny random models: loss goes down, the retriever learns or stays frozen,
the documents never change, and an interrupted run resumes to the same weights."""

from __future__ import annotations

import json

import pytest
import torch

from openbook.errors import InputError
from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from openbook.train import TrainConfig, train
from openbook.train.trainer import lr_factor
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder

EXAMPLES = [("capital of france", "paris"), ("who wrote the sun rises", "hemingway"),
            ("largest ocean", "pacific"), ("largest mountain", "everest")]


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    return build_knowledge_base(PASSAGES, tiny_encoder(), tmp_path_factory.mktemp("kb") / "kb", progress=False)


def make_rag(kb, model="rag-sequence", learn_scale=False) -> RAG:
    tok = bart_tokenizer()
    gen = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=11, init_std=0.05, d_model=32), tok)
    return RAG(tiny_encoder(), gen, kb, model=model, k=3, learn_scale=learn_scale)


def params(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_training_lowers_the_loss_and_moves_both_parts(kb, tmp_path, model):
    rag = make_rag(kb, model, learn_scale=True)
    enc0, gen0, docs0 = params(rag.query_encoder), params(rag.generator), kb.embeddings.copy()
    with torch.no_grad():
        before = float(rag.loss([x for x, _ in EXAMPLES], [y for _, y in EXAMPLES]))
    cfg = TrainConfig(k=3, max_steps=25, batch_size=4, lr_generator=3e-3, lr_query_encoder=1e-3, checkpoint_every=100)
    state = train(rag, EXAMPLES, cfg, tmp_path / "run", progress=False)
    rag.eval()
    with torch.no_grad():
        after = float(rag.loss([x for x, _ in EXAMPLES], [y for _, y in EXAMPLES]))
    assert after < before * 0.7, (before, after)
    assert state.step == 25 and (tmp_path / "run" / "checkpoint" / "model.safetensors").is_file()
    assert any(not torch.equal(v, params(rag.query_encoder)[k]) for k, v in enc0.items())
    assert any(not torch.equal(v, params(rag.generator)[k]) for k, v in gen0.items())
    assert (kb.embeddings == docs0).all()  # document encoder and index stay frozen


def test_frozen_retriever_keeps_the_query_encoder(kb, tmp_path):
    rag = make_rag(kb)
    enc0 = params(rag.query_encoder)
    cfg = TrainConfig(k=3, max_steps=3, batch_size=2, freeze_retriever=True, lr_generator=1e-3)
    train(rag, EXAMPLES, cfg, tmp_path / "run", progress=False)
    assert all(torch.equal(v, params(rag.query_encoder)[k]) for k, v in enc0.items())


def test_a_frozen_retriever_retrieves_once_without_dropout_and_releases_the_index(kb, tmp_path, monkeypatch):
    """A frozen q(x) runs in eval mode (dropout would change its top k from step to step), the training questions'
    passages are retrieved once and read from memory, and the index is released while the generator trains."""
    rag = make_rag(kb)
    modes, seen = [], []
    rag.query_encoder.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    retrieve = rag.retrieve

    def watched(questions, k=None, where=None):
        found = retrieve(questions, k, where)
        seen.append((type(rag.retriever).__name__, kb._index is None, list(questions), found.ids.copy()))
        return found

    monkeypatch.setattr(rag, "retrieve", watched)
    cfg = TrainConfig(k=3, max_steps=4, batch_size=2, freeze_retriever=True, lr_generator=1e-3)
    train(rag, EXAMPLES, cfg, tmp_path / "run", progress=False)
    assert modes and not any(modes)  # q(x) ran (once, pinning) and never in training mode
    assert len(seen) == 4 and all(name == "PinnedRetriever" and released for name, released, _, _ in seen)
    assert type(rag.retriever).__name__ == "DenseRetriever"  # the model's own retriever is back
    rag.eval()
    for _, _, questions, ids in seen:  # what training read is what asking retrieves (the index read again)
        assert (retrieve(questions, 3).ids == ids).all()
    assert kb._index is not None


def test_interrupted_run_resumes_to_the_same_weights(kb, tmp_path):
    cfg = TrainConfig(k=2, max_steps=6, batch_size=2, grad_accumulation=2, checkpoint_every=2, lr_generator=1e-3,
                      lr_query_encoder=1e-3, epochs=1)
    straight = make_rag(kb)
    train(straight, EXAMPLES, cfg, tmp_path / "a", progress=False)
    interrupted = make_rag(kb)
    train(interrupted, EXAMPLES, cfg, tmp_path / "b", progress=False, stop_after=2)  # "killed" after step 2
    resumed = make_rag(kb)  # a new process: fresh weights, state comes from the checkpoint
    state = train(resumed, EXAMPLES, cfg, tmp_path / "b", resume=True, progress=False)
    assert state.step == 6
    a, b = params(straight), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_command_offers_the_trainers_schedules():
    import argparse

    from openbook.commands import train as command
    from openbook.train.trainer import LR_SCHEDULES

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    action = next(a for a in parser._subparsers._group_actions[0].choices["train"]._actions if a.dest == "lr_schedule")
    assert tuple(action.choices) == LR_SCHEDULES


def test_lr_factor_warms_up_then_falls_linearly_to_zero():
    assert [lr_factor(s, 6) for s in range(6)] == [1.0] * 6
    assert [lr_factor(s, 6, "constant", warmup_steps=2) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert [lr_factor(s, 4, "linear") for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    assert [lr_factor(s, 6, "linear", warmup_steps=2) for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    with pytest.raises(InputError, match="unknown learning-rate schedule 'cosine'"):
        lr_factor(0, 4, "cosine")


def test_linear_schedule_sets_every_steps_rates_and_an_interrupted_run_resumes_onto_them(kb, tmp_path, monkeypatch):
    import openbook.train.trainer as trainer

    rates = []
    step = trainer._optimiser_step

    def recording(model, optimizer, *args):
        rates.append({g["name"]: g["lr"] for g in optimizer.param_groups})
        return step(model, optimizer, *args)

    monkeypatch.setattr(trainer, "_optimiser_step", recording)
    cfg = TrainConfig(k=2, max_steps=5, batch_size=2, checkpoint_every=2, lr_generator=1e-3, lr_query_encoder=2e-3,
                      lr_schedule="linear", warmup_steps=1)
    straight = make_rag(kb)
    train(straight, EXAMPLES, cfg, tmp_path / "a", progress=False)
    assert [r["generator"] for r in rates] == pytest.approx([1e-3, 1e-3, 0.75e-3, 0.5e-3, 0.25e-3], rel=1e-12)
    assert [r["query_encoder"] for r in rates] == pytest.approx([2e-3, 2e-3, 1.5e-3, 1e-3, 0.5e-3], rel=1e-12)
    rates.clear()
    interrupted = make_rag(kb)
    train(interrupted, EXAMPLES, cfg, tmp_path / "b", progress=False, stop_after=2)  # killed after step 2
    resumed = make_rag(kb)
    train(resumed, EXAMPLES, cfg, tmp_path / "b", resume=True, progress=False)
    assert [r["generator"] for r in rates[2:]] == pytest.approx([0.75e-3, 0.5e-3, 0.25e-3], rel=1e-12)
    a, b = params(straight), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    constant = make_rag(kb)
    train(constant, EXAMPLES, TrainConfig(**{**cfg.__dict__, "lr_schedule": "constant", "warmup_steps": 0}),
          tmp_path / "c", progress=False)
    assert any(not torch.equal(a[k], params(constant)[k]) for k in a)  # the schedule changed the weights


def test_a_killed_runs_checkpoint_copies_are_removed_and_one_process_trains_a_folder(kb, tmp_path):
    """kill -9 during save_checkpoint leaves a half-written `.checkpoint.building-*` copy (269 MB in the
    finding) beside the checkpoint; the next run into the folder, holding its lock, removes it. A second
    process training into a folder that is being trained into is refused."""
    from openbook.atomic import exclusive_lock
    from openbook.train.trainer import LOCK_FILE

    out = tmp_path / "run"
    cfg = TrainConfig(k=2, max_steps=2, batch_size=2, checkpoint_every=1, lr_generator=1e-3)
    train(make_rag(kb), EXAMPLES, cfg, out, progress=False, stop_after=1)
    leftovers = [out / ".checkpoint.building-0123456789ab", out / ".checkpoint.old-0123456789ab"]
    for leftover in leftovers:
        leftover.mkdir()
        (leftover / "model.safetensors").write_bytes(b"half written")
    mine = out / ".checkpoint.notes"  # not a temporary name: kept
    mine.write_text("my notes")
    state = train(make_rag(kb), EXAMPLES, cfg, out, resume=True, progress=False)
    assert state.step == 2 and not any(p.exists() for p in leftovers) and mine.read_text() == "my notes"
    with exclusive_lock(out / LOCK_FILE, "held by another trainer"):
        with pytest.raises(InputError, match="busy"):
            train(make_rag(kb), EXAMPLES, cfg, out, resume=True, progress=False)


def test_bad_training_input_is_a_clear_error(kb, tmp_path):
    with pytest.raises(InputError, match="no training examples"):
        train(make_rag(kb), [], TrainConfig(), tmp_path / "x", progress=False)
    with pytest.raises(InputError, match="no checkpoint"):
        train(make_rag(kb), EXAMPLES, TrainConfig(max_steps=1), tmp_path / "y", resume=True, progress=False)


def test_train_command_end_to_end(kb, tmp_path, capsys):
    """`openbook train` on models given as local folders, with a dev set, then --resume."""
    import json

    from openbook.cli import main
    from openbook.rag.assemble import build_knowledge_base

    rag = make_rag(kb)
    gen_dir, enc_dir = tmp_path / "gen", tmp_path / "enc"
    rag.generator.model.save_pretrained(gen_dir)
    rag.generator.tokenizer.save_pretrained(gen_dir)
    rag.query_encoder.model.save_pretrained(enc_dir)
    rag.query_encoder.tokenizer.save_pretrained(enc_dir)
    from openbook.models import load_encoder

    kb_dir = tmp_path / "kb"
    build_knowledge_base(PASSAGES, load_encoder(str(enc_dir)), kb_dir, progress=False)  # as the CLI loads it
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"input": x, "target": y}) for x, y in EXAMPLES))
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps({"question": x, "answers": [y]}) for x, y in EXAMPLES[:2]))
    args = ["train", "--train", str(data), "--dev", str(dev), "--kb", str(kb_dir), "--out", str(tmp_path / "run"),
            "--generator", str(gen_dir), "--encoder", str(enc_dir), "--k", "2", "--max-steps", "2",
            "--lr-schedule", "linear", "--warmup-steps", "1", "--batch-size", "2", "--checkpoint-every", "1"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["steps"] == 2 and 0.0 <= out["dev"]["exact_match"] <= 1.0
    config = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())["config"]
    assert config["lr_schedule"] == "linear" and config["warmup_steps"] == 1
    assert main(args[:-4] + ["--max-steps", "3", "--resume", "--batch-size", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3


TASK_FILES = {
    # task: (file name, content in the format of ../shared/data, the (input, target) pairs expected)
    "curatedtrec": ("trec.tsv", ("1\tfactoid\tWhat is the largest ocean?\tPacific( Ocean)?\n"
                                "2\tfactoid\tWho wrote The Sun Also Rises?\t(Ernest )?Hemingway\n"),
                    [("What is the largest ocean?", "Pacific Ocean"),
                     ("Who wrote The Sun Also Rises?", "Ernest Hemingway")]),
    "webquestions": ("wq.json", json.dumps([{"qId": "a", "qText": "capital of france?", "answers": ["Paris"]},
                                            {"qId": "b", "qText": "largest ocean?", "answers": ["Pacific"]}]),
                     [("capital of france?", "Paris"), ("largest ocean?", "Pacific")]),
    "jeopardy": ("j.jsonl", "\n".join(json.dumps(r) for r in [
        {"context": "OCEANS: The largest ocean of the world", "continuation": "Pacific", "category": "oceans"},
        {"context": "AUTHORS: He wrote The Sun Also Rises", "continuation": "Hemingway", "category": "authors"}]),
                 [("Pacific", "The largest ocean of the world"), ("Hemingway", "He wrote The Sun Also Rises")]),
    "fever3": ("fever.jsonl", "\n".join(json.dumps(r) for r in [
        {"id": 1, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "Paris is in France.",
         "evidence": [[[1, 2, "Paris", 0]]]},
        {"id": 2, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "Everest is blue.",
         "evidence": [[[3, None, None, None]]]}]),
               [("Paris is in France.", "true"), ("Everest is blue.", "unknown")]),
    "kilt": ("nq-dev-kilt.jsonl", "\n".join(json.dumps(r) for r in [
        {"id": "1", "input": "largest ocean?", "output": [{"answer": "Pacific", "provenance": [{"title": "Ocean"}]},
                                                          {"provenance": [{"title": "Pacific Ocean"}]}]},
        {"id": "2", "input": "capital of france?", "output": [{"answer": ""}, {"answer": "Paris"}]}]),
             [("largest ocean?", "Pacific"), ("capital of france?", "Paris")]),
    "boolq": ("boolq.jsonl", "\n".join(json.dumps(r) for r in [
        {"query": "Passage: Paris is the capital of France.\nQuestion: is paris in france?", "choices": ["no", "yes"],
         "gold": 1}]),
              [("is paris in france?", "yes")]),
}


@pytest.mark.parametrize("task", sorted(TASK_FILES))
def test_train_command_reads_every_task_format(kb, tmp_path, capsys, monkeypatch, task):
    """`openbook train --task T` trains on the formats of ../shared/data through the task's reader (labels
    as one-token targets) and scores the dev set with the task's primary metric."""
    import openbook.train as train_module
    from openbook.cli import main
    from openbook.eval.tasks import get_task
    from tiny_runs import save_tiny_models

    name, content, pairs = TASK_FILES[task]
    data = tmp_path / name
    data.write_text(content + "\n")
    seen = []
    real_train = train_module.train
    monkeypatch.setattr(train_module, "train", lambda rag, examples, *a, **kw: seen.append(list(examples))
                        or real_train(rag, examples, *a, **kw))
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    # the tiny tokenizer has no words "true"/"no": label tasks train here, but their dev set cannot be scored
    dev = [] if get_task(task).labels else ["--dev", str(data)]
    args = ["train", "--task", task, "--train", str(data), *dev, "--kb", str(kb_dir),
            "--out", str(tmp_path / "run"), "--generator", str(gen_dir), "--encoder", str(enc_dir), "--k", "2",
            "--max-steps", "1", "--batch-size", "2"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seen == [pairs]
    if dev:
        primary = get_task(task).primary_metric
        assert set(out["dev"]) == {primary, "n"} and 0.0 <= out["dev"][primary] <= 1.0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["task"] == task


def test_train_command_task_errors_name_the_file(tmp_path, capsys):
    from openbook.cli import main

    bad = tmp_path / "trec.tsv"
    bad.write_text("only one column\n")
    assert main(["train", "--task", "curatedtrec", "--train", str(bad), "--out", str(tmp_path / "r")]) != 0
    assert "trec.tsv" in capsys.readouterr().err
    assert main(["train", "--task", "squad", "--train", str(bad), "--out", str(tmp_path / "r")]) != 0
    assert "unknown task 'squad'" in capsys.readouterr().err


def test_read_pairs_uses_the_shared_question_answers_reader(tmp_path):
    """`openbook train` without --task reads {input, target} and {question, answers} (NQ-open) lines, plain
    or gzip, with the qa task's checks: a bad line is a one-line error naming file:line."""
    import gzip

    from openbook.commands.train import read_pairs
    from openbook.errors import InputError

    lines = [{"input": "who wrote it", "target": "hemingway"},
             {"question": " capital of france ", "answers": ["paris", "Paris"], "ctxs": [{"title": "P", "text": "x"}]}]
    data = tmp_path / "train.jsonl.gz"
    data.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in lines).encode()))
    assert read_pairs(str(data)) == [("who wrote it", "hemingway", ["hemingway"]),
                                     ("capital of france", "paris", ["paris", "Paris"])]
    assert read_pairs(str(data), limit=1) == [("who wrote it", "hemingway", ["hemingway"])]
    bad = tmp_path / "bad.jsonl"
    for content, problem in [(json.dumps(lines[0]) + "\n{oops\n", "bad.jsonl:2: malformed JSON"),
                             (json.dumps({"question": "q", "answers": []}) + "\n", "bad.jsonl:1: 'answers'"),
                             (json.dumps({"text": "q"}) + "\n", "bad.jsonl:1: expected {question, answers}"),
                             ("\n", "bad.jsonl: no examples")]:
        bad.write_text(content)
        with pytest.raises(InputError, match=problem):
            read_pairs(str(bad))


def test_train_command_max_context_length_is_kept_by_the_run(kb, tmp_path, capsys):
    """--max-context-length cuts the generator's inputs in training and is restored by load_run."""
    from openbook.cli import main
    from openbook.rag.assemble import load_run
    from tiny_runs import save_tiny_models

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"input": x, "target": y}) for x, y in EXAMPLES))
    base = ["train", "--train", str(data), "--kb", str(kb_dir), "--generator", str(gen_dir), "--encoder",
            str(enc_dir), "--k", "2", "--max-steps", "1", "--batch-size", "2"]
    assert main(base + ["--out", str(tmp_path / "run"), "--max-context-length", "12"]) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["max_context_length"] == 12
    assert load_run(tmp_path / "run").generator.max_context_length == 12
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "bad"), "--max-context-length", "0"]) == 2
    assert "--max-context-length" in capsys.readouterr().err


def test_mixed_precision_warns_without_native_bfloat16(kb, tmp_path, capsys, monkeypatch):
    from openbook.cli import main
    from openbook.models import precision
    from tiny_runs import save_tiny_models

    monkeypatch.setattr(precision, "bf16_hardware", lambda: False)
    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"input": x, "target": y}) for x, y in EXAMPLES))
    assert main(["train", "--train", str(data), "--kb", str(kb_dir), "--generator", str(gen_dir), "--encoder",
                 str(enc_dir), "--k", "2", "--max-steps", "1", "--batch-size", "2", "--mixed-precision",
                 "--out", str(tmp_path / "run")]) == 0
    assert "no native bfloat16" in capsys.readouterr().err


# ------------------------------------------------------------------------------- safe checkpoints


class _RunsCode:
    """A pickle payload: unpickling it creates a marker file (as a crafted .pt file could run anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


CHECKPOINT_FILES = {"model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "rng.json",
                    "state.json"}


def test_checkpoint_is_safetensors_and_json_only(kb, tmp_path):
    cfg = TrainConfig(k=2, max_steps=1, batch_size=2, lr_generator=1e-3)
    train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", progress=False)
    files = {p.name for p in (tmp_path / "run" / "checkpoint").iterdir()}
    assert files == CHECKPOINT_FILES
    rng = json.loads((tmp_path / "run" / "checkpoint" / "rng.json").read_text())
    assert len(rng["python"]["state"]) == 625  # Mersenne Twister state + position, as plain numbers


def test_resume_never_unpickles_a_planted_file(kb, tmp_path):
    """Finding: a crafted checkpoint/rng.pt ran a shell command on `train --resume` and training exited 0."""
    import pickle

    cfg = TrainConfig(k=2, max_steps=2, batch_size=2, checkpoint_every=1, lr_generator=1e-3)
    train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", progress=False, stop_after=1)
    marker = tmp_path / "MARKER"
    for name in ("rng.pt", "model.pt", "optimizer.pt"):
        (tmp_path / "run" / "checkpoint" / name).write_bytes(pickle.dumps(_RunsCode(marker)))
    assert train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", resume=True, progress=False).step == 2
    assert not marker.exists()


@pytest.mark.parametrize("name", sorted(CHECKPOINT_FILES - {"state.json"}))
def test_resume_from_a_damaged_checkpoint_is_a_clear_error(kb, tmp_path, name):
    cfg = TrainConfig(k=2, max_steps=2, batch_size=2, checkpoint_every=1, lr_generator=1e-3)
    train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", progress=False, stop_after=1)
    (tmp_path / "run" / "checkpoint" / name).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(InputError, match=name.replace(".", r"\.")) as error:
        train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", resume=True, progress=False)
    assert "\n" not in str(error.value)


def test_resume_refuses_an_old_pickle_checkpoint(kb, tmp_path):
    import pickle

    cfg = TrainConfig(k=2, max_steps=2, batch_size=2, checkpoint_every=1, lr_generator=1e-3)
    train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", progress=False, stop_after=1)
    checkpoint, marker = tmp_path / "run" / "checkpoint", tmp_path / "MARKER"
    for name in CHECKPOINT_FILES - {"state.json"}:
        (checkpoint / name).unlink()
    for name in ("model.pt", "optimizer.pt", "rng.pt"):  # the layout openbook wrote before
        (checkpoint / name).write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(InputError, match="old pickle-based model.pt"):
        train(make_rag(kb), EXAMPLES, cfg, tmp_path / "run", resume=True, progress=False)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["garbage", "pickle", "wrong tensors"])
def test_ask_run_with_a_crafted_weights_file_is_a_one_line_error(tmp_path, capsys, damage):
    """Finding: `ask --run` with a crafted model.pt gave a traceback. Now: a one-line error, nothing unpickled."""
    import pickle

    from safetensors.torch import save_file

    from openbook.cli import main
    from tiny_runs import save_tiny_models, train_run

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    run = train_run(tmp_path, "run", "rag-sequence", gen_dir, enc_dir, kb_dir)
    weights, marker = run / "checkpoint" / "model.safetensors", tmp_path / "MARKER"
    if damage == "garbage":
        weights.write_bytes(b"\xff" * 64)
    elif damage == "pickle":
        weights.unlink()
        (run / "checkpoint" / "model.pt").write_bytes(pickle.dumps(_RunsCode(marker)))
    else:
        save_file({"generator.model.lm_head.weight": torch.zeros(3, 3)}, str(weights))
    capsys.readouterr()
    assert main(["ask", "who wrote the sun rises", "--run", str(run), "--k", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("openbook: error:") and "\n" not in err and "Traceback" not in err
    assert not marker.exists()
