"""Abstention against provenance-checked labels: which right answers today does the book actually answer?

``bench/abstention.py`` labels its answerable side by string matching: a question the shipped default answers
right today. Some of those answers are right by chance, from passages that do not answer the question ("What
drugs does Charlie Sheen do?" answered "cocaine" from Pablo Escobar's article; run 11 of docs/results.md). The
issue's mixed set asks for "questions the demo knowledge base answers", and a lucky answer is not one: the
threshold must then keep answers no passage supports, and those look like the unanswerable ones.

This bench reads labels of each right answer today, development and test, made by reading its question, gold
answers, the answer and its top k passages (blind to every score and to the split, in a shuffled order):
``supported`` when one of the passages, read with its title, states the answer to the question as asked; not
when the answer appears only in a passage about something else, or in none. Unclear cases are labelled
supported, which keeps them on the side the threshold must keep. The labels, each unsupported one with a note, are
``bench/data/abstention-provenance.jsonl``; the instructions the readers had, word for word, are
``bench/data/abstention-provenance-reading.md``; ``--export FILE`` writes the items to read. A second reader,
with the same instructions and without the first labels, read every unsupported answer and as many supported ones
drawn at random, shuffled together (``bench/data/abstention-provenance-recheck.jsonl``); the bench prints how often
the two agree.

It then scores run 9's signal (``combined-6``, the six features) twice, as ``bench/abstention_signals.py``
scores its candidates (cross-validated on the development set with 20 seeded two-fold splits by question;
fitted on all of it for the test set's AUC and its abstention at 95% of right answers answered), first with every
right answer on the answerable side, then with only the supported ones (the unsupported ones are left out, on
neither side). It also scores the shipped calibration (``ABSTAIN_WEIGHTS`` and the default's threshold) on the test
set both ways. The unanswerable side is unchanged: no answer in the top k (absent) and deleted-answer questions.

Usage:  OMP_NUM_THREADS=2 PYTHONPATH=. python bench/abstention_provenance.py [--data-dir ../shared/data]
        [--labels bench/data/abstention-provenance.jsonl] [--export FILE]

Run ``bench/abstention.py`` first (its caches). It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from _abstention_sets import golds_of, item_id, read_labels, supported_only, write_rows  # noqa: E402
from abstention import set_arguments, shipped_figures, shipped_score  # noqa: E402
from abstention_signals import evaluate, shipped_items  # noqa: E402

LABELS = REPO / "bench" / "data" / "abstention-provenance.jsonl"
RECHECK = REPO / "bench" / "data" / "abstention-provenance-recheck.jsonl"


def to_read(items: list[dict], golds: dict[str, list[str]], seed: int) -> list[dict]:
    """The right answers of ``items`` as a reader sees them: no score, no split, in a seeded shuffled order."""
    rows = [{"id": item_id(it["question"]), "question": it["question"], "gold": golds[it["question"]],
             "answer": it["answer"], "passages": [{"title": p[2], "text": p[3]} for p in it["passages"]]}
            for it in items if it["kind"] == "right"]
    random.Random(seed).shuffle(rows)
    return rows


def agreement(first: dict[str, bool], second: dict[str, bool]) -> dict:
    """How often two readings of the same items agree, and Cohen's kappa (agreement beyond chance)."""
    ids = [i for i in second if i in first]
    if not ids:
        return {"items": 0}
    observed = sum(first[i] == second[i] for i in ids) / len(ids)
    p1, p2 = (sum(labels[i] for i in ids) / len(ids) for labels in (first, second))
    chance = p1 * p2 + (1 - p1) * (1 - p2)
    return {"items": len(ids), "agree": round(observed, 4),
            "kappa": round((observed - chance) / (1 - chance), 4) if chance < 1 else 1.0}


def main(argv=None) -> None:
    p = set_arguments(__doc__.splitlines()[0])
    p.add_argument("--labels", default=str(LABELS), help="the provenance labels of the right answers")
    p.add_argument("--recheck", default=str(RECHECK), help="a second reading of some of them")
    p.add_argument("--export", default=None, metavar="FILE", help="write the right answers to read, and stop")
    args = p.parse_args(argv)
    rag, _, items = shipped_items(args)
    data_dir = Path(args.data_dir)
    if args.export:
        rows = to_read(items, {q: r["answers"] for q, r in golds_of(data_dir).items()}, args.seed)
        write_rows(args.export, rows)
        print(f"{len(rows)} right answers to read in {args.export}")
        return
    labels = read_labels(Path(args.labels))
    kept = supported_only(items, labels)
    counts = {}
    for split in ("dev", "test"):
        right = [it for it in items if it["split"] == split and it["kind"] == "right"]
        counts[split] = {"right_today": len(right),
                         "supported": sum(labels[item_id(it["question"])] for it in right)}
    print(f"right answers today, supported by a passage: development {counts['dev']['supported']} of "
          f"{counts['dev']['right_today']}, test {counts['test']['supported']} of {counts['test']['right_today']}")
    second = agreement(labels, read_labels(Path(args.recheck)))
    print(f"a second reading of {second['items']} of them agrees on {second['agree']:.1%} (Cohen's kappa "
          f"{second['kappa']:.2f})")
    threshold = rag.abstain_threshold  # the shipped default's calibrated threshold
    shown = Path(args.labels).resolve()
    figures = {"labels": str(shown.relative_to(REPO)) if shown.is_relative_to(REPO) else args.labels,
               "threshold": threshold, "counts": counts, "second_reading": second}
    for name, group in (("all right answers", items), ("supported only", kept)):
        f = evaluate(group, ["combined-6"], args.keep, args.rounds, args.seed)["combined-6"]  # run 9's six
        test_right = [it["f"] for it in group if it["split"] == "test" and it["kind"] == "right"]
        f["shipped_calibration"] = {kind: shipped_figures(threshold, test_right, [
            it["f"] for it in group if it["split"] == "test" and it["kind"] == kind]) for kind in ("absent", "deleted")}
        figures[name] = f
        cal = f["shipped_calibration"]
        print(f"{name}: cross-validated keeps {f['answered_right']:.1%}, abstains on {f['abstain']['all']:.1%} "
              f"(absent {f['abstain']['absent']:.1%}, deleted {f['abstain']['deleted']:.1%}); test AUC "
              f"{f['test_auc']['absent']:.3f} / {f['test_auc']['deleted']:.3f}; test at 95% answered abstains on "
              f"{f['test_at_95']['absent']:.1%} / {f['test_at_95']['deleted']:.1%}; the shipped calibration answers "
              f"{cal['absent']['test_other_answered_right']:.1%} and abstains on "
              f"{cal['absent']['test_abstain_unanswerable']:.1%} / {cal['deleted']['test_abstain_unanswerable']:.1%}")
    lucky = [it["f"] for it in items if it["split"] == "test" and it["kind"] == "right"
             and not labels[item_id(it["question"])]]
    abstained = sum(shipped_score(f) < threshold for f in lucky)
    figures["unsupported_test_abstained"] = {"of": len(lucky), "abstained": abstained}
    print(f"the shipped calibration abstains on {abstained} of the test set's {len(lucky)} unsupported right answers")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
