"""Compiled encoding (``encode_passages(compile=True)``, ``kb build --compile``): a TorchInductor-compiled copy of
the document encoder, int8 through PyTorch 2 export and torchao's x86 quantiser (issue 12: encoding at 3x sentence-transformers).

Compiling takes a C++ compiler; without one these tests skip (and the error test checks the message)."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
import torch
from torch import nn

from openbook.errors import InputError
from openbook.models import precision
from tiny import PASSAGES, tiny_encoder
from tolerance import int8_bound, model_tolerance

needs_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++")),
                                    reason="no C++ compiler (g++ or clang++): TorchInductor cannot compile here")


@pytest.fixture(scope="module")
def encoder():
    return tiny_encoder()


def longest(encoder) -> int:
    return max(len(f["input_ids"]) for f in encoder.tokenize_passages(PASSAGES))


@needs_compiler
def test_compiled_float32_encoding_is_the_eager_encoding(encoder):
    # batches of 5 over 6 passages: the last batch is one row, which runs twice (a lone row would compile a
    # second graph) and must come back as itself
    assert len(PASSAGES) % 5 == 1
    eager = encoder.encode_passages(PASSAGES, batch_size=5)
    compiled = encoder.encode_passages(PASSAGES, batch_size=5, compile=True)
    assert compiled.shape == eager.shape and compiled.dtype == np.float32
    # unit vectors from the same float32 computation, with Inductor's own order of each reduction
    atol = model_tolerance(1.0, encoder.model.config, length=longest(encoder))["atol"]
    assert np.abs(compiled - eager).max() <= atol
    assert encoder.encode_passages(PASSAGES[:1], compile=True).shape == (1, eager.shape[1])


@needs_compiler
def test_compiled_int8_quantises_every_linear_layer_through_export_and_stays_within_int8_rounding(encoder):
    pytest.importorskip("torchao")
    eager = encoder.encode_passages(PASSAGES, batch_size=4)
    compiled = encoder.encode_passages(PASSAGES, batch_size=4, dtype="int8", compile=True)
    copy = encoder._compiled_model("int8")
    assert isinstance(copy, precision.ExportedInt8) and copy.model is None  # exported and quantised at its first call
    targets = [str(node.target) for node in copy.compiled._orig_mod.graph.nodes if node.op == "call_function"]
    linears = [m for m in encoder.model.modules() if isinstance(m, nn.Linear)]
    # every linear layer's weight is int8 per output channel, and its input rounded per tensor at each call
    # (query, key and value share one input and so one rounding)
    assert targets.count("quantized_decomposed.dequantize_per_channel.default") == len(linears) == targets.count(
        "aten.linear.default")
    assert 0 < targets.count("quantized_decomposed.choose_qparams.tensor") < len(linears)
    assert all(type(p) is nn.Parameter and p.dtype == torch.float32 for p in encoder.model.parameters())  # untouched
    # each input rounded to 8 bits over its range (at most 1/127.5 of its largest value), each weight row to 8
    # bits over its largest: within the 7-bit-input bound int8_bound allows for; then integer products, exact
    difference = np.abs(compiled - eager).max()
    assert 0 < difference <= int8_bound(encoder.model.config, scale=1.0)


@needs_compiler
def test_compiled_int8_exported_on_an_unpadded_batch_still_masks_the_padding_of_later_ones():
    pytest.importorskip("torchao")
    encoder = tiny_encoder()
    lengths = [len(f["input_ids"]) for f in encoder.tokenize_passages(PASSAGES)]
    same = [p for p, n in zip(PASSAGES, lengths) if n == lengths[0]][:2]
    assert len(same) == 2 and len(set(lengths)) > 1
    encoder.encode_passages(same, dtype="int8", compile=True)  # the export sees an attention mask of ones only
    eager = encoder.encode_passages(PASSAGES, batch_size=len(PASSAGES))
    compiled = encoder.encode_passages(PASSAGES, batch_size=len(PASSAGES), dtype="int8", compile=True)
    assert np.abs(compiled - eager).max() <= int8_bound(encoder.model.config, scale=1.0)


@needs_compiler
def test_compiled_int8_refuses_a_lone_row_in_one_line(encoder):
    pytest.importorskip("torchao")
    copy = encoder._compiled_model("int8")
    features = encoder.tokenize_passages(PASSAGES[:1])
    with pytest.raises(InputError, match=r"batches of 2 or more rows .* input_ids \(1, \d+\)") as caught:
        copy(input_ids=torch.tensor([features[0]["input_ids"]]),
             attention_mask=torch.ones(1, len(features[0]["input_ids"]), dtype=torch.long))
    assert "\n" not in str(caught.value)


@needs_compiler
def test_a_changed_weight_recompiles_the_copy(encoder):
    first = encoder._compiled_model("float32")
    assert encoder._compiled_model("float32") is first
    with torch.no_grad():
        encoder.model.embeddings.word_embeddings.weight.mul_(1.0)  # in place: the weights' version moves
    assert encoder._compiled_model("float32") is not first


def test_compiling_without_a_cxx_compiler_or_torchao_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(InputError, match=r"needs a C\+\+ compiler .* none was found") as caught:
        precision.compile_for_inference(nn.Linear(2, 2), "float32")
    assert "\n" not in str(caught.value)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/g++")
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import fails as if torchao were missing
    with pytest.raises(InputError, match=r"needs torchao: pip install 'openbook\[compile\]'") as caught:
        precision.compile_for_inference(nn.Linear(2, 2), "int8")
    assert "\n" not in str(caught.value)


def test_kb_build_passes_compile_to_the_local_encoder_and_to_every_ray_actor(monkeypatch, encoder):
    import argparse
    import contextlib

    from openbook.commands import kb_encode
    from openbook.index.kb import ray_encode

    args = argparse.Namespace(encode_dtype="int8", compile=True, ray=None, ray_workers=2, encoder="minilm")
    with kb_encode.build_encode_passages(args, encoder) as encode:
        assert encode.func == encoder.encode_passages and encode.keywords == {"dtype": "int8", "compile": True}
    made = []

    @contextlib.contextmanager
    def fake_pool(make_encode, workers, address):
        made.append((make_encode, workers, address))
        yield "pool"

    monkeypatch.setattr(ray_encode, "RayEncodePassages", fake_pool)
    with kb_encode.build_encode_passages(argparse.Namespace(**{**vars(args), "ray": ""}), encoder) as encode:
        assert encode == "pool"
    (make_encode, workers, address), = made
    assert make_encode.func is kb_encode.load_encode_passages and make_encode.args == ("minilm", "int8", True)
    assert (workers, address) == (2, None)


@needs_compiler
def test_compiled_int8_exports_a_dpr_context_encoder_whose_vectors_are_its_pooler_output(tmp_path):
    pytest.importorskip("torchao")
    from openbook.models import Encoder
    from tiny_encoders import save_dpr

    encoder = Encoder.from_pretrained(save_dpr(tmp_path / "ctx", role="context", projection_dim=8))
    eager = encoder.encode_passages(PASSAGES, batch_size=4)
    compiled = encoder.encode_passages(PASSAGES, batch_size=4, dtype="int8", compile=True)
    assert compiled.shape == eager.shape == (len(PASSAGES), 8)
    # not normalised: the bound scales with the largest vector component
    assert np.abs(compiled - eager).max() <= int8_bound(encoder.model.config, scale=float(np.abs(eager).max()))


@needs_compiler
def test_compiled_int8_of_a_model_export_cannot_trace_is_a_one_line_error(monkeypatch):
    pytest.importorskip("torchao")
    import torch.export

    def refuse(*args, **kwargs):
        raise RuntimeError("data-dependent branch on a tensor value\nlong trace ...")

    monkeypatch.setattr(torch.export, "export", refuse)
    copy = precision.compile_for_inference(nn.Identity(), "int8")
    ids = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(InputError, match=r"cannot export the encoder \(Identity\): data-dependent branch on a tensor "
                                         r"value; encode without --compile") as caught:
        copy(input_ids=ids)
    assert "\n" not in str(caught.value)


def test_kb_build_compile_with_ray_leaves_the_check_to_the_actors_and_does_not_warn():
    import argparse
    import warnings

    from openbook.commands import kb_encode

    # the actors compile once each and keep their compiled copy for the whole build
    # (tests/index/test_kb_build_ray.py: the actors load their encoder once), so nothing to warn about
    args = argparse.Namespace(encode_dtype="int8", compile=True, ray="")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kb_encode.check_build_compile(args)
