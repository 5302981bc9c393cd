"""LoRA vs full fine-tuning of the offline default generator: what one training step costs and what a run keeps.

The shipped default (scripts/train_default.sh) trains LoRA adapters (rank 16 on every linear layer of
SmolLM2-135M-Instruct) with the retriever frozen; the paper fine-tunes the whole generator. Both variants take
the same step (``RAG.loss`` over 4 NQ-style questions x k=5 passages, backward, Adam) in float32 as the recipe
trains on a CPU without native bfloat16 (``--mixed-precision``: bfloat16 autocast, as ``openbook train
--mixed-precision``), timed interleaved in one process. ``lora-no-dropout`` is the shipped LoRA with dropout 0,
which lets peft skip the dropout of every adapter's input. Reported per variant: median seconds per step, trainable parameters, and the
bytes a checkpoint keeps (trained weights + Adam's two moments, float32), which decides what can ship in the
repository (25 MB).

Usage:  PYTHONPATH=. python bench/lora_vs_full.py [--repeats 3] [--mixed-precision]
"""

from __future__ import annotations

import argparse
import json

import torch
from _common import interleaved_medians, print_header, quiet

QUESTIONS = [("who wrote the old man and the sea", "Ernest Hemingway"),
             ("when is the next deadpool movie being released", "May 18, 2018"),
             ("what is the capital of australia", "Canberra"),
             ("who got the first nobel prize in physics", "Wilhelm Conrad Röntgen")]
VARIANTS = ("full", "lora", "lora-no-dropout")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--mixed-precision", action="store_true", help="bfloat16 autocast (default: float32)")
    args = p.parse_args(argv)
    print_header()
    quiet()
    from openbook.models.adapters import LoraSettings, add_lora
    from openbook.rag.assemble import load_model

    models = {name: load_model(untrained=True) for name in VARIANTS}
    add_lora(models["lora"].generator.model, LoraSettings(r=args.rank, alpha=2 * args.rank))  # dropout 0.05
    add_lora(models["lora-no-dropout"].generator.model, LoraSettings(r=args.rank, alpha=2 * args.rank, dropout=0.0))
    for rag in models.values():
        for param in rag.query_encoder.parameters():
            param.requires_grad_(False)  # the shipped recipe's frozen retriever, for both
        rag.train()
    trainable = {name: [p for p in rag.generator.parameters() if p.requires_grad] for name, rag in models.items()}
    optimizers = {name: torch.optim.Adam(params, lr=1e-5) for name, params in trainable.items()}
    questions, answers = [q for q, _ in QUESTIONS], [a for _, a in QUESTIONS]

    def step(name: str) -> float:
        optimizers[name].zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mixed_precision):
            loss = models[name].loss(questions, answers, k=args.k)
        loss.backward()
        optimizers[name].step()
        return float(loss.detach())

    _, med = interleaved_medians(step, VARIANTS, args.repeats)
    params = {name: sum(p.numel() for p in ps) for name, ps in trainable.items()}
    checkpoint_mb = {name: round(3 * 4 * n / 1e6, 1) for name, n in params.items()}  # weights + 2 Adam moments
    weights_mb = {name: round(4 * n / 1e6, 1) for name, n in params.items()}
    for name in VARIANTS:
        print(f"{name:15s} {med[name]:7.2f} s/step   {params[name]:>11,d} trainable   weights {weights_mb[name]} MB   "
              f"checkpoint with Adam {checkpoint_mb[name]} MB")
    print(json.dumps({"seconds_per_step": {n: round(v, 3) for n, v in med.items()},
                      "speedup_lora": round(med["full"] / med["lora"], 3),
                      "speedup_no_dropout": round(med["lora"] / med["lora-no-dropout"], 3), "trainable_params": params,
                      "weights_mb": weights_mb, "checkpoint_mb": checkpoint_mb, "rank": args.rank, "k": args.k,
                      "precision": "bfloat16" if args.mixed_precision else "float32"}))


if __name__ == "__main__":
    main()
