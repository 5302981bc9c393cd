"""Which number type a generator runs in: float32, bfloat16 where the CPU computes it natively, or int8.

``bfloat16`` halves the bytes every matrix product reads and, on CPUs with AVX-512 BF16 or AMX, runs
those products in hardware; elsewhere PyTorch emulates it, slower than float32. ``int8`` is PyTorch's
dynamic quantisation (:func:`quantize_int8`): every linear layer but the output head keeps its weights
as int8 with one scale per output channel, and quantises its input on the fly, per call and per tensor;
FBGEMM's integer kernels run it on any x86-64 CPU with AVX2, CPU only. It is never automatic: on the
shipped default it answers faster than float32 on an AVX2 CPU (``bench/ask_latency.py``) but scores far
lower exact match on held-out NQ (``scripts/eval_default.sh nq-int8``; the model card has the figures), because one
scale per tensor cannot hold the model's outlier activations: the input of block 11's MLP down-projection reaches
thousands of times its 99.9th percentile, so all its other values round to zero
(``bench/activation_outliers.py``). ``auto`` picks bfloat16 where :func:`bf16_hardware` says so, else
float32. Generators return their logits as float32 and take log-softmax (and every marginal over documents)
there, whatever the weights' type.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from openbook.errors import InputError
from openbook.presets import DTYPES

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def bf16_hardware() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX); elsewhere it is emulated."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(check() for check in checks if check is not None)


def int8_engine() -> bool:
    """Whether PyTorch has its x86 quantised engine (FBGEMM) here, which runs :func:`quantize_int8`'s layers."""
    return bool({"x86", "fbgemm"} & set(torch.backends.quantized.supported_engines))


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """``"float32"``, ``"bfloat16"`` or ``"int8"`` for one of :data:`DTYPES` on a ``device`` type
    (``"cpu"``/``"cuda"``). ``auto``: bfloat16 on native hardware, else float32 (never int8, which is lossy);
    ``int8`` asked for where it cannot run is a one-line :class:`InputError`."""
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if dtype == "auto":
        return "bfloat16" if bf16_hardware() else "float32"
    if dtype == "int8" and not (device == "cpu" and int8_engine()):
        where = "a CUDA device" if device != "cpu" else "this CPU (PyTorch has no x86 quantised engine here)"
        raise InputError(f"dtype int8 (dynamic quantisation) runs on x86 CPUs only, not on {where}: "
                         "use float32 or bfloat16")
    return dtype


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.Linear`` but its output head dynamically quantised to int8, in place.

    Weights become int8 with one scale per output channel (``per_channel_dynamic_qconfig``); each call
    quantises its input with one scale for the whole tensor and accumulates in int32 (FBGEMM). The output
    head (the tied word embeddings of a causal LM) stays float32: it turns hidden states into the logits
    every log-probability and marginal is taken from. Embedding, normalisation and attention stay float32.
    For inference only: quantised layers have no gradients."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    spec = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
            if type(module) is nn.Linear and module is not head}
    if not spec:
        return model
    with warnings.catch_warnings():  # torch.ao's notice that eager quantisation moves to torchao some day
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


def bfloat16_linears(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.Linear``'s weight and bias cast to bfloat16, in place: under bfloat16 autocast a
    linear layer casts its float32 weights at every call, and these it finds cast already, so the layer's results
    are the same and the copies go. Normalisation and embeddings stay float32. For inference under autocast."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.to(torch.bfloat16)
    return model


def compile_for_inference(model: nn.Module, dtype: str):
    """``model`` (changed in place: pass a copy) compiled by TorchInductor for inference in ``dtype``.

    Dynamic shapes (one graph for every batch of two or more rows and every length), frozen weights
    (constants Inductor folds and packs for its CPU kernels). float32 and bfloat16 compile the model as it is;
    call it under the caller's autocast, as the eager model. ``int8`` returns an :class:`ExportedInt8`, which
    quantises at its first call, through PyTorch 2 export. The first calls compile (tens of seconds on 2
    cores): worth it for a corpus, not for one batch. Needs a C++ compiler, and torchao for int8 (``pip install
    'openbook[compile]'``); without them a one-line :class:`InputError`."""
    check_compile(dtype)
    if dtype == "int8":
        return ExportedInt8(model)
    return torch.compile(model, dynamic=True, options={"freezing": True})


class ExportedInt8:
    """An encoder called with keyword tensors of shape (batch, length), in int8 through PyTorch 2 export.

    At the first call (which needs two or more rows) the model is exported with symbolic batch and length
    (``torch.export``, non-strict; a model it cannot trace is a one-line :class:`InputError`), and every
    ``nn.Linear`` is dynamically quantised by torchao's ``X86InductorQuantizer`` (meant for encoders, which
    have no output head to keep in float32): each call rounds the layer's input to 8 bits over its range
    (one scale for the tensor), the weights to 8 bits per output channel. Inductor, with frozen weights,
    lowers each of them to one oneDNN quantised linear kernel with packed weights; attention, normalisation and
    the rest stay float32. (torchao's ``Int8DynamicActivationInt8WeightConfig``, one scale per row, which this
    replaced, encoded slower in ``bench/build_throughput.py``'s runs: docs/benchmarks.md.) Returns what the model returns."""

    def __init__(self, model: nn.Module):
        self.model: nn.Module | None = model.eval()
        self.compiled = None

    def __call__(self, **inputs: torch.Tensor):
        if any(value.dim() < 2 or min(value.shape[:2]) < 2 for value in inputs.values()):
            shapes = ", ".join(f"{name} {tuple(value.shape)}" for name, value in inputs.items())
            raise InputError(f"compiled int8 takes batches of 2 or more rows of 2 or more tokens, not {shapes}")
        with torch._inductor.config.patch(freezing=True):  # torchao's int8 lowering runs in freezing passes
            if self.compiled is not None:
                return self.compiled(**inputs)
            self.compiled = _quantise_exported(self.model, inputs)
            self.model = None  # the exported copy holds its own weights
            with warnings.catch_warnings():  # Inductor's own lowering warns (torch.tensor of a tensor) as it compiles
                warnings.simplefilter("ignore", UserWarning)
                return self.compiled(**inputs)


def _quantise_exported(model: nn.Module, inputs: dict[str, torch.Tensor]):
    try:  # the extra openbook[compile]; check_compile found it, but a broken install still gets one line
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86
    except ImportError as error:
        raise InputError(f"compiled int8 encoding (--compile with int8) needs a working torchao: {error}") from None
    from torch.export import Dim, export

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exported = export(model, (), inputs, strict=False,
                              dynamic_shapes={name: {0: Dim.AUTO, 1: Dim.AUTO} for name in inputs}).module()
        except Exception as error:  # a model torch.export cannot trace: say so in one line
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise InputError(f"compiled int8 cannot export the encoder ({type(model).__name__}): {reason}; "
                             "encode without --compile") from None
        quantizer = x86.X86InductorQuantizer()
        quantizer.set_global(x86.get_default_x86_inductor_quantization_config(is_dynamic=True))
        prepared = prepare_pt2e(exported, quantizer)
        prepared(**inputs)  # the weight observers take their per-channel ranges
        converted = convert_pt2e(prepared)
    return torch.compile(converted, dynamic=True)


def check_compile(dtype: str) -> None:
    """A one-line :class:`InputError` unless :func:`compile_for_inference` can run ``dtype`` here: a C++
    compiler for Inductor, and torchao for int8 (checked without importing it)."""
    import importlib.util
    import shutil

    if not any(shutil.which(name) for name in (os.environ.get("CXX", ""), "g++", "clang++") if name):
        raise InputError("compiling the encoder (--compile) needs a C++ compiler (g++ or clang++, or $CXX); "
                         "none was found: install one or encode without --compile")
    if dtype == "int8":
        try:
            found = importlib.util.find_spec("torchao.quantization") is not None
        except (ImportError, ValueError):  # a parent package that cannot be imported, or a stand-in module
            found = False
        if not found:
            raise InputError("compiled int8 encoding (--compile with int8) needs torchao: "
                             "pip install 'openbook[compile]'")
