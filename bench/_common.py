"""Shared pieces of the benchmarks that compare openbook with transformers' RAG (not run by `make bench`)."""

from __future__ import annotations

import os
import platform
import shlex
import sys
import warnings

# BartConfig() defaults are bart-large; these are bart-base's sizes
BART_BASE = dict(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                 decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)


def quiet() -> None:
    import logging

    for name in ("torchao", "torch.utils._pytree"):  # torchao's import-time noise, as openbook's CLI quiets it
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")


def print_header() -> None:
    """The command that reproduces this run, the library versions and the CPU threads/load."""
    import torch
    import transformers

    env_prefix = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""
    command = f"cd {shlex.quote(os.getcwd())} && {env_prefix}" + " ".join(map(shlex.quote, [sys.executable, *sys.argv]))
    print(f"command:       {command}")
    print(f"versions:      torch {torch.__version__}, transformers {transformers.__version__}, "
          f"python {platform.python_version()}")
    print(f"threads:       torch.get_num_threads() = {torch.get_num_threads()} (os.cpu_count() = {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f} at start)")
    print(f"cpu:           {cpu_description()}")


def cpu_description() -> str:
    """The CPU's model name and its matrix extensions: bfloat16 products run several times faster with Intel's AMX
    than with AVX-512 alone, so the same benchmark's ratios differ between machines of this kind."""
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    extensions = [flag for flag in ("avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if flag in flags]
    return f"{model} ({', '.join(extensions) or 'no AVX-512 BF16/VNNI or AMX'})"


def interleaved_medians(step, variants, repeats: int) -> tuple[dict, dict]:
    """``(first results, median seconds)`` of ``step(name)`` for each variant: one untimed warm-up round, then
    ``repeats`` timed rounds whose order alternates (so drift on a shared machine hits every variant alike)."""
    import gc
    import statistics
    import time

    first = {name: step(name) for name in variants}
    times = {name: [] for name in variants}
    for r in range(repeats):
        for name in (variants if r % 2 == 0 else variants[::-1]):
            gc.collect()
            t = time.perf_counter()
            step(name)
            times[name].append(time.perf_counter() - t)
        print(f"  round {r + 1}/{repeats}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in variants), flush=True)
    return first, {name: statistics.median(v) for name, v in times.items()}


NQ_FILE = "nq-open-oracle.dev-split.jsonl.gz"


def nq_split(data_dir) -> tuple[list[dict], list[dict]]:
    """(the training four fifths, the held-out fifth) of ``data_dir``'s NQ-open records, as
    ``scripts/split_qa_data.py`` splits them (the held-out fifth is never trained on)."""
    import gzip
    import json
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from split_qa_data import split

    with gzip.open(Path(data_dir) / NQ_FILE, "rt", encoding="utf-8") as fh:
        return split([json.loads(line) for line in fh if line.strip()])
