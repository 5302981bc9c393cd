"""`openbook train --init RUN`: a new run that starts from another run's trained weights (or the shipped default's).

The run's architecture comes from RUN's run.json: its generator, encoder and LoRA adapters (rank, alpha and target
layers; the dropout is this run's), its context length and prompt; what training changes (the adapters, or the
generator, the score scale and the query encoder when it was trained) is loaded from its checkpoint. Options given
as well must agree with it, so that the weights fit the model they are loaded into.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from openbook.errors import InputError


def init_run(args: argparse.Namespace, lora):
    """``((RUN's folder, its run.json), the LoRA settings to train with)``; an InputError naming what disagrees.
    Fills ``args.generator``, ``args.encoder`` and ``args.max_context_length`` from RUN where not given."""
    from openbook.data import default_run_path
    from openbook.models.adapters import LoraSettings
    from openbook.rag.assemble import _as_location, read_run_spec

    folder = default_run_path() if args.init == "default" else Path(args.init)
    if folder is None:
        raise InputError("--init default: this installation ships no default model")
    if not (folder / "run.json").is_file():
        raise InputError(f"--init {args.init}: no run.json in {folder} (give an `openbook train --out` folder)")
    spec = read_run_spec(folder)
    what = f"--init {args.init}"
    if (spec["model"] == "closed-book") != (args.model == "closed-book"):
        raise InputError(f"{what} is a {spec['model']} run; a {args.model} run cannot start from it")
    for option, key, given in (("--generator", "generator", args.generator), ("--encoder", "encoder", args.encoder)):
        if given not in (None, "default") and _as_location(given) != spec.get(key):
            raise InputError(f"{what} was trained with {key} {spec.get(key)!r}, not {option} {given!r}")
    args.generator = spec["generator"]
    args.encoder = args.encoder or (spec.get("encoder") if spec.get("encoder") != "default" else None)
    if spec.get("lora"):
        trained = LoraSettings.from_dict(spec["lora"])
        if lora is not None and (lora.r, lora.alpha) != (trained.r, trained.alpha):
            raise InputError(f"{what} has LoRA adapters of rank {trained.r} (alpha {trained.alpha}), not --lora "
                             f"{lora.r} (alpha {lora.alpha})")
        dropout = lora.dropout if lora is not None else trained.dropout
        lora = LoraSettings(r=trained.r, alpha=trained.alpha, dropout=dropout, target_modules=trained.target_modules)
    elif lora is not None:
        raise InputError(f"{what} fine-tuned the whole generator: it has no LoRA adapters to continue (drop --lora)")
    args.max_context_length = args.max_context_length or spec.get("max_context_length")
    return (folder, spec), lora


def start_from(rag, folder: Path, spec: dict) -> None:
    """Load RUN's trained weights into ``rag`` (built as :func:`init_run` set it up) and use its prompt."""
    from openbook.models.adapters import has_lora, lora_tensor_names
    from openbook.models.weights import load_weights, weights_path
    from openbook.rag.assemble import apply_run_prompt

    apply_run_prompt(rag.generator, spec, folder)
    lora = has_lora(rag.generator)
    load_weights(rag, weights_path(folder / "checkpoint", hint="is it an `openbook train --out` run?"),
                 f"the weights of {folder}", required=lora_tensor_names(rag) if lora else None)
