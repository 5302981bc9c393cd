#!/usr/bin/env python
"""Paired significance of two `openbook eval` reports on the same questions (e.g. two versions of the default).

Usage: python scripts/compare_reports.py A/report.json B/report.json [--metric exact_match]
       (a report from git: git show REV:docs/models/default/nq-bf16/report.json > /tmp/a.json)
Prints both scores, how many predictions are the same string, McNemar's exact test (for right/wrong metrics)
and a paired bootstrap of B - A, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openbook.eval.metrics.significance import mcnemar, paired_bootstrap  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--metric", default="exact_match")
    args = p.parse_args(argv)
    reports = [json.loads(Path(f).read_text(encoding="utf-8"))["predictions"] for f in (args.a, args.b)]
    if [r["input"] for r in reports[0]] != [r["input"] for r in reports[1]]:
        sys.exit("compare_reports: the two reports are not on the same questions in the same order")
    a, b = ([r["scores"][args.metric] for r in rows] for rows in reports)
    binary = all(v in (0, 1) for v in a + b)  # McNemar needs right/wrong; Q-BLEU, F1 ... get the bootstrap only
    test, boot = (mcnemar(a, b) if binary else None), paired_bootstrap(b, a)
    same = sum(x.get("prediction") == y.get("prediction") for x, y in zip(*reports))
    print(f"{args.metric}: A {sum(a) / len(a):.4f}  B {sum(b) / len(b):.4f}  (n={len(a)}, same prediction {same})")
    if test:
        print(f"McNemar: A only {test.a_only}, B only {test.b_only}, p={test.p_value:.4f}")
    print(f"bootstrap B-A: {boot.diff:+.4f}, 95% CI [{boot.ci95[0]:+.4f}, {boot.ci95[1]:+.4f}], p={boot.p_value:.4f}")
    print(json.dumps({"metric": args.metric, "n": len(a), "same_predictions": same,
                      "a": sum(a) / len(a), "b": sum(b) / len(b),
                      "mcnemar_p": test.p_value if test else None, "diff": boot.diff, "ci95": list(boot.ci95),
                      "bootstrap_p": boot.p_value}))


if __name__ == "__main__":
    main()
