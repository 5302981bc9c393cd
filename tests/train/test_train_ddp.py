"""Data-parallel training (DDP under torchrun, gloo, 2 CPU processes) ends where one process ends on the
same global batches, resumes across world sizes and after one of them was killed mid-step;
`openbook train --nproc 2` runs end to end, rank 0
alone writing the run; bad --nproc / batch sizes are one-line errors.

The runs train in float64 (tests/helpers/ddp_worker.py --float64), all of it, retrieval's p(z|x) included: Adam
divides each gradient by its own running size, so in float32 the rounding noise of a gradient that is zero
or largely cancels in exact arithmetic (an attention key's bias; the score scale's, a sum over the k
documents) becomes an update of a sizeable fraction of lr; in float64 that noise stays far below Adam's
epsilon, and what is left is rounding, bounded by tests/helpers/tolerance.py (:func:`assert_same_weights`), some
10^9 below the O(lr) change a wrong shard weight, a lost gradient or a wrong resume position makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import ddp_worker
from openbook.cli import main
from tolerance import magnitude, tolerance

WORKER = Path(ddp_worker.__file__)
ROOT = WORKER.parents[2]
# the tiny BART's longest reduction is its 128-word vocabulary; 2 encoder + 2 decoder layers: 2*2 + 3*2 + 1
TERMS, DEPTH = 128, 11
STEPS = ["--max-steps", "4"]


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp") / "kb"
    ddp_worker.build_kb(path)
    return str(path)


def two_processes(kb: str, out: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--log-dir", str(out.parent / "torchrun-logs"), str(WORKER), kb, str(out), "--float64", *args], env=env, capture_output=True, text=True,
                          timeout=600)
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def one_process(kb: str, out: Path, *args: str) -> None:
    threads = torch.get_num_threads()
    try:
        assert ddp_worker.main([kb, str(out), "--float64", *args]) == 0
    finally:
        torch.set_num_threads(threads)


def weights(out: Path) -> dict:
    return load_file(str(out / "checkpoint" / "model.safetensors"))


def assert_same_weights(a: dict, b: dict, steps: int = 4) -> None:
    """Every weight within float64 rounding of the tiny BART's reductions at the weights' magnitude, plus
    what the updates add: 1 and 2 processes compute each gradient in other batches, so it may differ by
    float64 rounding relative to itself, which moves Adam's update (about lr a step, whatever the gradient's
    size) by as much relative to lr, over ``steps`` steps. (Nothing is float32: the index's float32 document
    vectors are widened exactly, and the scores and p(z|x) are computed in float64.)"""
    assert a.keys() == b.keys()
    tol = tolerance(max(magnitude(t) for t in a.values()), terms=TERMS, depth=DEPTH, dtype=torch.float64)
    cfg = ddp_worker.config(steps, 1)
    largest_update = steps * max(cfg.lr_generator, cfg.lr_query_encoder, cfg.lr_score_scale)
    tol["atol"] += tolerance(terms=TERMS, depth=DEPTH, dtype=torch.float64, scale=largest_update)["atol"]
    for name in a:
        torch.testing.assert_close(b[name], a[name], **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_two_processes_end_with_the_weights_of_one_on_the_same_global_batches(kb, tmp_path):
    # batches of 4 over 7 examples: every other global batch has 3, split 2 + 1 (unequal shards)
    one_process(kb, tmp_path / "one", *STEPS, "--batch-size", "4")
    two_processes(kb, tmp_path / "two", *STEPS, "--batch-size", "4")
    a, b = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert_same_weights(a, b)
    start = ddp_worker.make_rag(ddp_worker.KnowledgeBase.load(kb)).double().state_dict()
    assert any(not torch.allclose(start[k], a[k]) for k in a)  # training moved the weights


def test_runs_resume_across_world_sizes_to_the_uninterrupted_weights(kb, tmp_path):
    # batches of 2, 2 micro-batches a step: the epoch's last micro-batch (1 example) leaves rank 1 none
    batches = ["--batch-size", "2", "--grad-accumulation", "2"]
    one_process(kb, tmp_path / "straight", *STEPS, *batches)
    two_processes(kb, tmp_path / "two", "--max-steps", "2", *batches)  # stopped after a checkpoint at step 2
    shutil.copytree(tmp_path / "two", tmp_path / "two_then_one")
    two_processes(kb, tmp_path / "two", *STEPS, *batches, "--resume")
    one_process(kb, tmp_path / "two_then_one", *STEPS, *batches, "--resume")
    one_process(kb, tmp_path / "one_then_two", "--max-steps", "2", *batches)
    two_processes(kb, tmp_path / "one_then_two", *STEPS, *batches, "--resume")
    straight = weights(tmp_path / "straight")
    for run in ("two", "two_then_one", "one_then_two"):
        assert_same_weights(straight, weights(tmp_path / run))


def test_a_killed_two_process_run_resumes_to_the_uninterrupted_weights(kb, tmp_path):
    every_2 = [*STEPS, "--checkpoint-every", "2"]
    one_process(kb, tmp_path / "straight", *every_2)
    # rank 1 dies by SIGKILL in step 3, before the all-reduce rank 0 waits in; torchrun then stops rank 0
    killed = two_processes(kb, tmp_path / "killed", *every_2, "--kill-rank-1-in-step", "3", ok=False)
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr[-3000:]
    saved = json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["state"]
    assert saved["step"] == 2  # the last checkpoint before the kill, complete
    two_processes(kb, tmp_path / "killed", *every_2, "--resume")
    assert_same_weights(weights(tmp_path / "straight"), weights(tmp_path / "killed"))


def test_a_float64_model_computes_p_z_given_x_in_float64(kb):
    # in float32, the score scale's gradient (a sum over the k documents that largely cancels) was rounding noise
    # relative to itself, and 1 and 2 processes' log_scale ended 1e-5 apart after 4 Adam steps of lr 1e-2
    rag = ddp_worker.make_rag(ddp_worker.KnowledgeBase.load(kb)).double()
    retrieval = rag.retrieve(["capital of france", "largest ocean"], 3)
    assert retrieval.scores.dtype == retrieval.doc_logprobs.dtype == torch.float64
    retrieval.doc_logprobs[:, 0].sum().backward()
    assert rag.log_scale.grad is not None and rag.log_scale.grad.dtype == torch.float64


# imported by the processes `openbook train --nproc 2` starts (first on their PYTHONPATH): each records the
# checkpoint writes it begins, with its rank, in $OPENBOOK_TEST_WRITES
SPY = """import os
import openbook.atomic as atomic

_atomic_dir = atomic.atomic_dir


def atomic_dir(path, *args, **kwargs):
    with open(os.environ["OPENBOOK_TEST_WRITES"], "a") as log:
        log.write(os.environ.get("RANK", "-") + " " + os.path.basename(str(path)) + "\\n")
    return _atomic_dir(path, *args, **kwargs)


atomic.atomic_dir = atomic_dir
"""


def test_train_command_with_nproc_2_runs_end_to_end_and_rank_0_alone_writes(tmp_path, monkeypatch, capfd):
    from tiny_runs import save_tiny_models

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"input": x, "target": y}) for x, y in ddp_worker.EXAMPLES))
    spy, writes = tmp_path / "spy", tmp_path / "writes.log"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(SPY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(spy), str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("OPENBOOK_TEST_WRITES", str(writes))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    temporary = tmp_path / "tmp"  # the launcher's temporary directory: empty again afterwards
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    run = tmp_path / "run"
    code = main(["train", "--train", str(data), "--kb", str(kb_dir), "--generator", str(gen_dir), "--encoder",
                 str(enc_dir), "--k", "2", "--max-steps", "2", "--batch-size", "2", "--checkpoint-every", "1",
                 "--learn-scale", "--nproc", "2", "--out", str(run)])
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(reports) == 1 and reports[0]["steps"] == 2, out  # rank 0 alone reports
    assert json.loads((run / "run.json").read_text())["learn_scale"] is True
    assert json.loads((run / "report.json").read_text())["steps"] == 2
    state = json.loads((run / "checkpoint" / "state.json").read_text())["state"]
    assert state["step"] == 2 and (run / "checkpoint" / "model.safetensors").is_file()
    begun = writes.read_text().splitlines()  # a checkpoint after each step and at the end: rank 0's, never rank 1's
    assert begun and set(begun) == {"0 checkpoint"}, begun
    assert not [p.name for p in run.iterdir() if p.name.startswith(".checkpoint")]  # no half-written copies
    assert not list(temporary.iterdir())  # torchrun's log folder went with the processes (no torchelastic_* left)


@pytest.mark.parametrize("options, message", [
    (["--nproc", "0"], "argument --nproc: "),
    (["--nproc", "2", "--batch-size", "3"], "--batch-size 3 (the global batch) does not divide among 2 processes"),
])
def test_bad_nproc_or_batch_size_is_a_one_line_error(tmp_path, capsys, options, message):
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "q", "answers": ["a"]}\n')
    code = main(["train", "--train", str(data), "--out", str(tmp_path / "run"), *options])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and err.splitlines()[-1].startswith(("openbook", "usage")), err
    assert not (tmp_path / "run").exists()
