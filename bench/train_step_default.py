"""One training step of the offline default RAG (MiniLM retriever + SmolLM2-135M-Instruct generator) on the
demo knowledge base: what `openbook train` spends per step, and what its two speed settings buy.

Four variants of the same step (``RAG.loss`` + backward, 4 NQ-style questions, k=5, the same retrieved
passages), timed interleaved in one process:

* ``float32, one padded block``: every prompt left-padded to the batch's longest (``length_group_cost =
  None``);
* ``float32, length groups``: prompts prefilled in length groups, each cut to its own longest prompt
  (the default);
* the same two with bfloat16 autocast (``openbook train --mixed-precision``).

It ends with one JSON line: the median seconds per step and the speedups over float32 one block.

Usage:  PYTHONPATH=. python bench/train_step_default.py [--repeats 3]
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
VARIANTS = ("fp32_onepad", "fp32_groups", "bf16_onepad", "bf16_groups")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--k", type=int, default=5)
    args = p.parse_args(argv)
    print_header()
    quiet()
    from openbook.models.generators import GROUP_COST_TOKENS
    from openbook.rag.assemble import load_rag

    rag = load_rag(model="rag-sequence", learn_scale=True)
    rag.train()
    questions, answers = [q for q, _ in QUESTIONS], [a for _, a in QUESTIONS]
    retrieval = rag.retrieve(questions, args.k)
    lengths = rag.generator.contexts(questions, retrieval.passages).attention_mask.sum(-1).tolist()
    print(f"workload:      {len(questions)} questions x k={args.k}, prompts of {min(lengths)}-{max(lengths)} tokens "
          f"({sum(lengths)} real of {len(lengths) * max(lengths)} padded positions)")

    def step(name: str) -> float:
        rag.zero_grad(set_to_none=True)
        rag.generator.length_group_cost = None if name.endswith("onepad") else GROUP_COST_TOKENS
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name.startswith("bf16")):
            loss = rag.loss(questions, answers, k=args.k)
        loss.backward()
        return float(loss.detach())

    losses, med = interleaved_medians(step, VARIANTS, args.repeats)
    for name in VARIANTS:
        print(f"{name:14s} {med[name]:7.2f} s/step   loss {losses[name]:.4f}")
    result = {"seconds": {n: round(v, 3) for n, v in med.items()},
              "losses": {n: round(v, 5) for n, v in losses.items()},
              "speedup_length_groups_fp32": round(med["fp32_onepad"] / med["fp32_groups"], 3),
              "speedup_bf16_groups": round(med["fp32_onepad"] / med["bf16_groups"], 3),
              "speedup_bf16_onepad": round(med["fp32_onepad"] / med["bf16_onepad"], 3),
              "prompt_tokens_real": sum(lengths), "prompt_tokens_padded": len(lengths) * max(lengths)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
