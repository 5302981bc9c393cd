"""The GPU path: ``--device``, models moved whole, decoding on its inputs' device, FAISS on the GPUs.

Everything runs on the CPU here; the tests marked ``needs CUDA`` run the same tiny model on a GPU and compare
it with the CPU within rounding, and are skipped where PyTorch sees no GPU.
"""

from __future__ import annotations

import copy
import inspect
import json

import faiss
import numpy as np
import pytest
import torch

import openbook.rag.assemble as assemble
from openbook import cli
from openbook.errors import InputError
from openbook.index.dense import FlatIPIndex, gpu
from openbook.models.device import module_device, resolve_device
from openbook.rag import RAG
from openbook.rag.beam import BeamConfig, beam_search, greedy_search
from tiny import tiny_parts
from tolerance import model_tolerance

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
QUESTIONS = ["who wrote the sun rises", "capital of france"]
ANSWERS = ["hemingway", "paris"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    return tiny_parts(tmp_path_factory.mktemp("kb"))


def tiny_rag(parts, device="cpu", model="rag-sequence") -> RAG:
    encoder, kb, generator = parts
    return RAG(copy.deepcopy(encoder), copy.deepcopy(generator), kb, model=model, k=3).eval().to(device)


# -- resolving --device ---------------------------------------------------------------------------------


@pytest.mark.parametrize("available, expected", [(False, "cpu"), (True, "cuda")])
def test_auto_is_cuda_only_where_torch_sees_a_gpu(monkeypatch, available, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == torch.device(expected)
    assert resolve_device("cpu") == torch.device("cpu")


def test_cuda_under_torchrun_is_the_processs_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("cuda") == torch.device("cuda:1")
    assert resolve_device("cuda:0") == torch.device("cuda:0")  # an explicit GPU stays


@pytest.mark.parametrize("bad", ["gpu", "cpu:0", "cuda:x", "", None])
def test_an_unknown_device_is_refused(bad):
    with pytest.raises(InputError, match="device must be one of auto, cpu, cuda"):
        resolve_device(bad)


def test_cuda_without_cuda_names_the_option(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match=r"^--device cuda: no CUDA device is available here"):
        resolve_device("cuda", "--device")


# -- the command line -----------------------------------------------------------------------------------


COMMANDS = [  # every command that runs a model or an encoder, with what it needs to parse
    ["ask", "q?"], ["eval", "--task", "nq", "--data", "x.jsonl"], ["eval", "retrieval", "--questions", "x.jsonl"],
    ["train", "--train", "x.jsonl", "--out", "o"], ["serve"], ["retrieve", "q?"], ["kb", "build", "s", "--out", "o"],
    ["kb", "add", "d", "s"], ["kb", "update", "d", "--file", "u"],
    ["experiments", "hot-swap", "--leaders", "l.csv", "--out", "o"],
    ["experiments", "k-sweep", "--data", "x.jsonl", "--out", "o"],
    ["experiments", "posterior", "--run", "r", "--question", "q", "--out", "o"],
    ["experiments", "fever", "--data", "x", "--train", "t", "--out", "o"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_every_model_command_takes_device_default_auto(argv):
    parser = cli.build_parser()
    assert parser.parse_args(argv).device == "auto"
    assert parser.parse_args([*argv, "--device", "cpu"]).device == "cpu"


def test_device_cuda_without_cuda_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loaded = []
    monkeypatch.setattr(assemble, "_load_model", lambda *a, **k: loaded.append(a))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n")
    for argv in (["ask", "q?"], ["retrieve", "q?"], ["eval", "retrieval", "--questions", str(questions)]):
        code = cli.main([*argv, "--device", "cuda"])
        out, err = capsys.readouterr()
        assert code == 2, argv
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "--device cuda: no CUDA device is available" in err
    assert loaded == []  # failed before loading anything


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_ask_runs_end_to_end_on_the_device(parts, monkeypatch, capsys, device):
    rag = tiny_rag(parts)
    monkeypatch.setattr(assemble, "_load_model", lambda *a, **k: rag)  # the real loader moves and returns it
    code = cli.main(["ask", "who wrote the sun rises", "--device", device, "--dtype", "float32", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    record = json.loads(out)
    assert isinstance(record["answer"], str) and len(record["passages"]) == 3
    expected = "cuda" if device == "auto" and torch.cuda.is_available() else "cpu"
    assert {p.device.type for p in rag.parameters()} == {expected}


def test_load_model_moves_generator_encoder_and_scale(parts, monkeypatch):
    rag = tiny_rag(parts)
    monkeypatch.setattr(assemble, "_load_model", lambda *a, **k: rag)
    assert assemble.load_model(device="cpu") is rag
    assert module_device(rag.generator) == module_device(rag.query_encoder) == rag.log_scale.device


# -- decoding takes its device from its inputs ----------------------------------------------------------


@pytest.mark.parametrize("search", [beam_search, greedy_search])
def test_searches_have_no_cpu_default(search):
    assert inspect.signature(search).parameters["device"].default is inspect.Parameter.empty


def _made_on(monkeypatch) -> list:
    """Record the ``device`` argument of every tensor factory call (None: made without one, on the CPU)."""
    seen = []
    for name in ("zeros", "ones", "full", "arange", "tensor", "empty"):
        original = getattr(torch, name)

        def factory(*args, _original=original, **kwargs):
            seen.append(kwargs.get("device"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, factory)
    return seen


@pytest.mark.parametrize("beams", [1, 3])
def test_searches_make_every_tensor_on_the_given_device(monkeypatch, beams):
    device = torch.device("cpu")  # a device object of its own: every factory call must be given it
    logits = torch.randn(7, 11, generator=torch.Generator().manual_seed(0))
    seen = _made_on(monkeypatch)
    cfg = BeamConfig(num_beams=beams, max_length=5, eos_token_id=2, pad_token_id=0)

    def step(tokens):
        assert tokens.device == device
        return logits[tokens % 7]

    if beams == 1:
        out = greedy_search(step, 2, 1, cfg, device)
    else:
        out = beam_search(step, lambda idx: None, lambda idx: None, 2, 1, cfg, device)
    assert out.sequences.device == device
    assert seen and all(d is device for d in seen), seen


# -- the same model on another device -------------------------------------------------------------------


def test_encoders_return_host_numpy(parts):
    vectors = parts[0].encode_queries(QUESTIONS)
    assert isinstance(vectors, np.ndarray) and vectors.dtype == np.float32


@needs_cuda
@pytest.mark.parametrize("model", ["rag-sequence", "rag-token"])
def test_cuda_loss_and_decoding_match_the_cpu(parts, model):
    cpu, cuda = tiny_rag(parts, "cpu", model), tiny_rag(parts, "cuda", model)
    config = cpu.generator.model.config
    reference = cpu.loss(QUESTIONS, ANSWERS).detach()
    on_gpu = cuda.loss(QUESTIONS, ANSWERS)
    assert on_gpu.device.type == "cuda"
    torch.testing.assert_close(on_gpu.detach().cpu(), reference, **model_tolerance(reference, config, 16))
    on_gpu.backward()  # gradients flow on the GPU
    prior = cpu.retrieve(QUESTIONS).doc_logprobs
    torch.testing.assert_close(cuda.retrieve(QUESTIONS).doc_logprobs.cpu(), prior,
                               **model_tolerance(prior, parts[0].model.config, 16))
    for beams in (1, 2):
        answers = cuda.ask(QUESTIONS, num_beams=beams, max_new_tokens=4)
        expected = cpu.ask(QUESTIONS, num_beams=beams, max_new_tokens=4)
        assert len(answers) == len(expected) and all(isinstance(a.answer, str) for a in answers)
        for a, b in zip(answers, expected):
            assert [p.id for p in a.passages] == [p.id for p in b.passages]


@needs_cuda
def test_cuda_encoder_matches_the_cpu(parts):
    encoder = parts[0]
    reference = encoder.encode_queries(QUESTIONS)
    on_gpu = copy.deepcopy(encoder).to("cuda").encode_queries(QUESTIONS)
    np.testing.assert_allclose(on_gpu, reference, **model_tolerance(reference, encoder.model.config, 16))


# -- FAISS on the GPUs ----------------------------------------------------------------------------------


def test_faiss_without_gpus_searches_on_the_host():
    if not hasattr(faiss, "get_num_gpus") or faiss.get_num_gpus() == 0:
        assert gpu.gpu_count() == 0
        assert gpu.on_gpus(faiss.IndexFlatIP(4)) is None


def test_a_flat_index_searches_its_gpu_copy_unless_ids_are_excluded(monkeypatch):
    searched = []

    class OnGpus:
        def __init__(self, index):
            self.index = index

        def search(self, queries, k):
            searched.append(len(queries))
            return self.index.search(queries, k)

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", OnGpus, raising=False)
    index = FlatIPIndex.create(4)
    vectors = np.eye(4, dtype=np.float32)
    index.add(vectors)
    scores, ids = index.search(vectors[:2], 1)
    assert searched == [2] and ids[:, 0].tolist() == [0, 1]
    index.search(vectors[:2], 1, exclude=[0])  # GPU indexes take no id selector: the host searches
    assert searched == [2]
    index.add(vectors[:1])  # the copy is stale: made again
    index.search(vectors[:1], 1)
    assert searched == [2, 1]
