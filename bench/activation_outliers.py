"""Why dynamic int8 (``--dtype int8``) loses exact match on the shipped default: the inputs of its linear layers.

PyTorch's dynamic quantisation rounds each linear layer's input with one scale per tensor (7 bits over the
input's range with FBGEMM), so one huge activation makes every ordinary value of that tensor round to zero.
This runs the shipped default (float32) on one question's five prompts and reports, for each quantised
layer's input, its largest absolute value, its 99.9th percentile and its median; and how many of the layer's
input values a 7-bit per-tensor scale rounds to zero.

    PYTHONPATH=. .venv/bin/python bench/activation_outliers.py [--question Q]

Ends with one JSON line: the worst layer, its max, p99.9 and median, and the fraction of its inputs that
round to zero.
"""

from __future__ import annotations

import argparse
import json

import torch
from _common import print_header, quiet


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--question", default="who got the first nobel prize in physics")
    args = p.parse_args(argv)
    print_header()
    quiet()
    from openbook.rag import RAG

    rag = RAG.load(dtype="float32")
    model = rag.generator.model
    head = model.get_output_embeddings()
    rows = []

    def watch(name):
        def hook(module, inputs, output):
            x = inputs[0].detach().abs().flatten().float()
            step = 2 * float(x.max()) / 127  # 7 bits over a range at most twice the largest magnitude
            rows.append({"layer": name, "max": float(x.max()), "p99_9": float(torch.quantile(x[:16_000_000], 0.999)),
                         "median": float(x.median()), "zero_fraction": float((x < step / 2).float().mean())})
        return hook

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            module.register_forward_hook(watch(name))
    rag.ask([args.question], k=5, num_beams=1, decoding="fast", max_new_tokens=1)  # prefill: one call per length group
    rows.sort(key=lambda r: -r["max"] / max(r["p99_9"], 1e-12))
    print(f"{'layer input':36s} {'max':>9s} {'p99.9':>8s} {'median':>8s} {'rounds to 0':>12s}")
    for r in rows[:8]:
        print(f"{r['layer']:36s} {r['max']:9.1f} {r['p99_9']:8.2f} {r['median']:8.3f} {r['zero_fraction']:12.1%}")
    worst = rows[0]
    print(json.dumps({"question": args.question, "layer_calls": len(rows), "worst_layer": worst["layer"],
                      "worst_max": round(worst["max"], 1), "worst_p99_9": round(worst["p99_9"], 3),
                      "worst_median": round(worst["median"], 4), "worst_zero_fraction": round(worst["zero_fraction"], 4),
                      "layer_calls_over_half_zero": sum(r["zero_fraction"] > 0.5 for r in rows)}))


if __name__ == "__main__":
    main()
