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

# How the model card's reports are made (scripts/eval_default.sh's ASK with Lazy decoding, which gives Fast's
# answers sooner, in float32): greedy, at most 16 new tokens. Reports compared question by question must be made
# alike: bench/open_domain.py and scripts/open_book_candidates.py make theirs with these.
MODEL_CARD_ASK = ("--beams", "1", "--decoding", "lazy", "--max-new-tokens", "16", "--dtype", "float32")


def compare_files(a_file, b_file, metric: str = "exact_match") -> dict:
    """Both reports' mean ``metric``, the number of equal predictions, McNemar (right/wrong metrics only) and a
    paired bootstrap of B - A; SystemExit if they are not on the same questions in the same order."""
    reports = [json.loads(Path(f).read_text(encoding="utf-8"))["predictions"] for f in (a_file, b_file)]
    if [r["input"] for r in reports[0]] != [r["input"] for r in reports[1]]:
        sys.exit(f"compare_reports: {a_file} and {b_file} are not on the same questions in the same order")
    a, b = ([r["scores"][metric] for r in rows] for rows in reports)
    binary = all(v in (0, 1) for v in a + b)  # McNemar needs right/wrong; Q-BLEU, F1 ... get the bootstrap only
    test, boot = (mcnemar(a, b) if binary else None), paired_bootstrap(b, a)
    same = sum(x.get("prediction") == y.get("prediction") for x, y in zip(*reports))
    return {"metric": metric, "n": len(a), "same_predictions": same, "a": sum(a) / len(a), "b": sum(b) / len(b),
            "a_only": test.a_only if test else None, "b_only": test.b_only if test else None,
            "mcnemar_p": test.p_value if test else None, "diff": boot.diff, "ci95": list(boot.ci95),
            "bootstrap_p": boot.p_value}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--metric", default="exact_match")
    args = p.parse_args(argv)
    r = compare_files(args.a, args.b, args.metric)
    print(f"{r['metric']}: A {r['a']:.4f}  B {r['b']:.4f}  (n={r['n']}, same prediction {r['same_predictions']})")
    if r["mcnemar_p"] is not None:
        print(f"McNemar: A only {r['a_only']}, B only {r['b_only']}, p={r['mcnemar_p']:.4f}")
    print(f"bootstrap B-A: {r['diff']:+.4f}, 95% CI [{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}], p={r['bootstrap_p']:.4f}")
    print(json.dumps({key: r[key] for key in ("metric", "n", "same_predictions", "a", "b", "mcnemar_p", "diff",
                                               "ci95", "bootstrap_p")}))

if __name__ == "__main__":
    main()
