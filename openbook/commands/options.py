"""The options several commands share, each declared once with one default, and the model they build.

``ask``, ``retrieve``, ``eval`` and ``train`` add the options they take with :func:`add_options`; the
model a command works with comes from :func:`model_from_args` (the one seam the CLI tests replace), which
builds it with :func:`openbook.rag.assemble.load_model`. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from openbook.commands import k_arg, positive_int
from openbook.errors import MAX_K
from openbook.presets import DECODINGS, DEVICES, DTYPES, MODELS, MODELS_WITH_CLOSED_BOOK, PAPER, RETRIEVERS, Preset

DEFAULT_DEVICE = "auto"
DEFAULT_K = 5  # RAG's own default (RAG(k=5)); a run's k replaces it
DEFAULT_BATCH_SIZE = 8


def _model(p, closed_book: bool = False) -> None:
    kinds = MODELS_WITH_CLOSED_BOOK if closed_book else MODELS
    extra = ", or closed-book (the generator alone, no retrieval: the paper's baseline)" if closed_book else ""
    p.add_argument("--model", choices=kinds, default=None,
                   help="how documents are marginalised: one document per answer (rag-sequence, eq. 1) or per "
                   f"token (rag-token, eq. 2){extra} (default: rag-sequence, or the --run's)")


def _run(p) -> None:
    p.add_argument("--run", metavar="DIR", default=None,
                   help="use the model trained by `openbook train --out DIR` (its generator, query encoder, "
                   "knowledge base, retriever and kind, unless --model/--kb/--retriever/--k say otherwise)")


def _kb(p) -> None:
    p.add_argument("--kb", metavar="DIR", default=None,
                   help="knowledge-base directory (default: the shipped demo knowledge base, or the --run's)")


def _generator(p) -> None:
    p.add_argument("--generator", metavar="NAME_OR_PATH", default="default",
                   help="generator p_theta: a model name or local path (default: the offline SmolLM2-135M-Instruct "
                   "with openbook's shipped fine-tuned adapters, docs/models/default.md)")


def _untrained(p) -> None:
    p.add_argument("--untrained", action="store_true",
                   help="the packaged generator as it is, without the shipped fine-tuned adapters")


def _encoder(p) -> None:
    p.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                   help="query encoder q(x): a model name or local path; must match the one the knowledge base "
                   "was indexed with (default: that one; for the demo knowledge base the offline all-MiniLM-L6-v2)")


def _k(p) -> None:
    p.add_argument("--k", type=k_arg, metavar="K", default=None,
                   help=f"passages retrieved per question, at most {MAX_K} (default: {DEFAULT_K}, or the --run's)")


def _retriever(p) -> None:
    p.add_argument("--retriever", choices=RETRIEVERS, default=None,
                   help="dense (MIPS with the query encoder, the paper's), bm25 (the paper's Table-6 ablation: BM25 "
                   "scores as the logits of p(z|x)) or hybrid (reciprocal rank fusion of both) (default: dense, "
                   "or the --run's)")


def _where(p) -> None:
    p.add_argument("--where", action="append", metavar="FIELD=VALUE", default=None,
                   help="keep only the passages whose metadata matches; repeatable, all must hold: FIELD=VALUE "
                   "(equal), FIELD^=PREFIX (text starting with PREFIX), FIELD>=X or FIELD<=X (at least / at most X: "
                   "numbers compare as numbers, ISO dates such as 2026-01-01 as text). Fields: source (the document), "
                   "type, page, section, modified, and any kept from the input; e.g. --where source^=handbook/ "
                   "--where modified>=2026-01-01. The top k is exact among the matching passages")


def where(args: argparse.Namespace):
    """The :class:`~openbook.index.filters.Filter` of ``--where`` (None without it); a malformed condition is a
    one-line :class:`~openbook.errors.InputError` naming it."""
    from openbook.index.filters import parse_where  # lazy: pulls in numpy

    return parse_where(getattr(args, "where", None))


def _beams(p, default: int) -> None:
    p.add_argument("--beams", type=positive_int, metavar="N", default=default,
                   help="beam size; 1 is greedy search (default: %(default)s)")


def _decoding(p, default: str) -> None:
    p.add_argument("--decoding", choices=DECODINGS, default=default,
                   help="RAG-Sequence decoding: 'thorough' rescores every candidate under every passage, 'fast' "
                   "treats candidates missing from a passage's beam as probability 0, 'lazy' gives fast's answer "
                   "reading passages in order of p(z|x) only until no unread one can change it (no posterior for "
                   "the unread ones) (default: %(default)s)")


def _max_new_tokens(p, default: int | None) -> None:
    what = "%(default)s" if default is not None else "the task's"
    p.add_argument("--max-new-tokens", type=positive_int, metavar="N", default=default,
                   help=f"longest answer, in generator tokens (default: {what})")


def _dtype(p, default: str) -> None:
    p.add_argument("--dtype", choices=DTYPES, default=default,
                   help="the generator's number type: float32; bfloat16 (fast where the CPU computes it natively, "
                   "AVX-512 BF16 or AMX); or int8 (dynamic quantisation of its linear layers, x86 CPUs: faster "
                   "than float32 but lossy, far below it in exact match: docs/models/default.md); "
                   "retrieval and log-probabilities stay float32 (bench/ask_latency.py); auto is bfloat16 on such a "
                   "CPU, else float32 (default: %(default)s)")


def _device(p) -> None:
    p.add_argument("--device", choices=DEVICES, default=DEFAULT_DEVICE,
                   help="where the models run: cpu, or cuda (a GPU; the knowledge base's vectors stay in FAISS on the "
                   "host, searched on the GPUs if faiss-gpu is installed); auto is cuda when PyTorch sees a GPU, "
                   "else cpu (default: %(default)s)")


def device(args: argparse.Namespace):
    """The :class:`torch.device` of ``--device`` (``auto`` resolved); ``--device cuda`` without CUDA is a one-line
    :class:`~openbook.errors.InputError` naming the option. For commands that load a model themselves."""
    from openbook.models.device import resolve_device  # lazy: pulls in torch

    return resolve_device(getattr(args, "device", DEFAULT_DEVICE), "--device")


def _batch_size(p) -> None:
    p.add_argument("--batch-size", type=positive_int, metavar="N", default=DEFAULT_BATCH_SIZE,
                   help="questions answered together (default: %(default)s)")


def _quiet(p) -> None:
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (otherwise drawn on standard error: in place on a terminal, else a line "
                   "now and then and one at the end)")


OPTIONS: dict[str, Callable] = {
    "model": _model, "run": _run, "kb": _kb, "generator": _generator, "untrained": _untrained, "encoder": _encoder, "k": _k,
    "retriever": _retriever, "where": _where, "beams": _beams, "decoding": _decoding, "max-new-tokens": _max_new_tokens,
    "dtype": _dtype, "batch-size": _batch_size, "device": _device,
    "quiet": _quiet,
}


def preset_defaults(preset: Preset) -> dict:
    """The defaults of the options a preset sets (:mod:`openbook.presets`), by option name."""
    return {"beams": preset.num_beams, "decoding": preset.decoding, "max-new-tokens": preset.max_new_tokens,
            "dtype": preset.dtype}


def add_options(parser: argparse.ArgumentParser, *names: str, closed_book: bool = False,
                preset: Preset = PAPER) -> None:
    """Add the shared options ``names`` (keys of :data:`OPTIONS`) to ``parser``; ``closed_book`` lets
    ``--model`` also be ``closed-book``; ``preset`` gives the defaults of ``--beams --decoding
    --max-new-tokens --dtype`` (:data:`~openbook.presets.PAPER`, or :data:`~openbook.presets.INTERACTIVE` for
    the commands that answer people: ``ask``, ``serve``)."""
    defaults = preset_defaults(preset)
    for name in names:
        if name == "model":
            _model(parser, closed_book)
        elif name in defaults:
            OPTIONS[name](parser, defaults[name])
        else:
            OPTIONS[name](parser)


def quiet_libraries() -> None:
    """Keep transformers' per-load progress bars and advice off the terminal: openbook prints its own
    progress for the slow one-time jobs (building a knowledge base, converting the generator)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def model_from_args(args: argparse.Namespace, **options):
    """The model of a command's parsed options (``--model --kb --generator --encoder --run --retriever
    --k --untrained --dtype --device``, those it has): :func:`openbook.rag.assemble.load_model`. Tests replace this
    function."""
    where = device(args)  # a missing GPU fails before anything loads
    quiet_libraries()
    # lazy: pulls in torch and transformers
    from openbook.rag.assemble import load_model

    return load_model(model=getattr(args, "model", None), kb=getattr(args, "kb", None),
                 generator=getattr(args, "generator", "default"), encoder=getattr(args, "encoder", None),
                 run=getattr(args, "run", None), retriever=getattr(args, "retriever", None),
                 k=getattr(args, "k", None), **{"untrained": getattr(args, "untrained", False),
                                                 "dtype": getattr(args, "dtype", PAPER.dtype), "device": where,
                                                 **options})
