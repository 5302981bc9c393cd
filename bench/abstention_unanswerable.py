"""Abstention against read labels of the unanswerable side: which "unanswerable" test questions does the book answer?

``bench/abstention.py`` labels its unanswerable side by string matching: a question none of whose gold answers is
in the top k passages (absent), or asked of a copy of the book without the passages holding its answers
(deleted). The first label is noisy: a WebQuestions gold answer is a Freebase name ("Danish Language"), so a
passage saying "Danish is spoken in Denmark" does not hold it by string, and a question the book answers counts as
one it cannot. A deleted-answer question can keep a passage that gives its answer in other words.

This bench reads labels of every unanswerable test question, made by reading its question, gold answers and top k
passages (blind to the model's answer, every score, the kind and the split, in a seeded shuffled order): ``held``
when one of the passages, read with its title, gives one of the gold answers (in any wording) to the question as
asked. Unclear cases are labelled not held, which keeps them on the side the threshold must abstain on. The labels,
each held one with a note, are ``bench/data/abstention-unanswerable.jsonl``; the instructions the readers had, word
for word, ``bench/data/abstention-unanswerable-reading.md``; ``--export FILE`` writes the items to read. A second
reader, with the same instructions and without the first labels, read every held question and as many others drawn
at random, shuffled together (``bench/data/abstention-unanswerable-recheck.jsonl``); the bench prints how often the
two agree.

The held questions' answers were then read too (question, gold answers and the model's answer only): ``right``
when the answer names a gold answer in any wording, unclear cases not right. The labels are
``bench/data/abstention-unanswerable-answers.jsonl``, the instructions
``bench/data/abstention-unanswerable-answers-reading.md``; ``--export-answers FILE`` writes the answers to read.

It then scores the shipped calibration (``ABSTAIN_WEIGHTS`` and the default's threshold) on the test set. Its
unanswerable side is labelled two ways: by string matching, every absent and deleted-answer question; by reading,
those whose passages hold no gold answer (a held question is not one the book cannot answer). Its answerable side is
the right answers a passage supports (``bench/data/abstention-provenance.jsonl``, as ``bench/abstention.py
--labels`` calibrates) and, read on both sides, also the held questions whose answer is right: the book answers them
and so does the model, so they are questions answered right today that string matching missed. For each: the share
answered or abstained on with a bootstrap interval, and what any threshold could reach (abstention at 95% answered,
thresholds set on the test set itself).

Usage:  OMP_NUM_THREADS=2 PYTHONPATH=. python bench/abstention_unanswerable.py [--data-dir ../shared/data]
        [--labels bench/data/abstention-unanswerable.jsonl] [--answers ...] [--export FILE] [--export-answers FILE]

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
from abstention import bootstrap, curve_points, set_arguments, share, shipped_score  # noqa: E402
from abstention_provenance import LABELS as PROVENANCE  # noqa: E402
from abstention_provenance import agreement  # noqa: E402
from abstention_signals import shipped_items  # noqa: E402

LABELS = REPO / "bench" / "data" / "abstention-unanswerable.jsonl"
RECHECK = REPO / "bench" / "data" / "abstention-unanswerable-recheck.jsonl"
ANSWERS = REPO / "bench" / "data" / "abstention-unanswerable-answers.jsonl"
KINDS = ("absent", "deleted")


def to_read(items: list[dict], golds: dict[str, list[str]], seed: int) -> list[dict]:
    """The unanswerable test questions of ``items`` as a reader sees them: question, gold answers and passages;
    no answer, score, kind or split; in a seeded shuffled order; a question asked twice is read once."""
    rows = {item_id(it["question"]): {"id": item_id(it["question"]), "question": it["question"],
                                      "gold": golds[it["question"]],
                                      "passages": [{"title": p[2], "text": p[3]} for p in it["passages"]]}
            for it in items if it["split"] == "test" and it["kind"] in KINDS}
    rows = sorted(rows.values(), key=lambda row: row["id"])
    random.Random(seed).shuffle(rows)
    return rows


def answers_to_read(items: list[dict], golds: dict[str, list[str]], held: dict[str, bool], seed: int) -> list[dict]:
    """The held questions' answers as a reader of answers sees them: question, gold answers and the model's answer
    (no passage, score, kind or split), once per question (one question asked twice gets the same answer from the
    same passages), in a seeded shuffled order."""
    rows = {item_id(it["question"]): {"id": item_id(it["question"]), "question": it["question"],
                                      "gold": golds[it["question"]], "answer": it["answer"]}
            for kind in KINDS for it in unanswerable(items, kind) if held[item_id(it["question"])]}
    rows = sorted(rows.values(), key=lambda row: row["id"])
    random.Random(seed).shuffle(rows)
    return rows


def unanswerable(items: list[dict], kind: str, held: dict[str, bool] | None = None) -> list[dict]:
    """The test items of ``kind`` (absent or deleted): all of them, by string matching; with ``held``, the read
    labels, those whose passages give no gold answer."""
    rows = [it for it in items if it["split"] == "test" and it["kind"] == kind]
    return rows if held is None else [it for it in rows if not held[item_id(it["question"])]]


def abstention(threshold: float, answerable: list[float], unanswerable: list[dict], seed: int) -> dict:
    """The shipped signal at ``threshold`` on ``unanswerable`` (items with features): the share abstained on, its
    bootstrap interval, and the curve's abstention at 95% of ``answerable`` (scores) answered."""
    flags = [shipped_score(it["f"]) < threshold for it in unanswerable]
    return {"questions": len(flags), "abstained": round(share(flags), 3), "ci": bootstrap(flags, seed),
            "at_95_answered": curve_points(answerable, [shipped_score(it["f"]) for it in unanswerable])
            .get("abstain_unanswerable_at_95_answered")}


def main(argv=None) -> None:
    p = set_arguments(__doc__.splitlines()[0])
    p.add_argument("--labels", default=str(LABELS), help="the read labels of the unanswerable test questions")
    p.add_argument("--recheck", default=str(RECHECK), help="a second reading of some of them")
    p.add_argument("--provenance", default=str(PROVENANCE), help="the provenance labels of the right answers")
    p.add_argument("--answers", default=str(ANSWERS), help="the read labels of the held questions' answers")
    p.add_argument("--export", default=None, metavar="FILE", help="write the questions to read, and stop")
    p.add_argument("--export-answers", default=None, metavar="FILE",
                   help="write the held questions' answers to read (after --labels), and stop")
    args = p.parse_args(argv)
    rag, _, items = shipped_items(args)
    golds = {q: r["answers"] for q, r in golds_of(Path(args.data_dir)).items()}
    if args.export:
        rows = to_read(items, golds, args.seed)
        write_rows(args.export, rows)
        print(f"{len(rows)} unanswerable test questions to read in {args.export}")
        return
    held = read_labels(Path(args.labels), "held")
    missing = [it["question"] for it in items if it["split"] == "test" and it["kind"] in KINDS
               and item_id(it["question"]) not in held]
    if missing:
        raise SystemExit(f"{len(missing)} unanswerable test questions have no label, e.g. {missing[0]!r}: read them")
    if args.export_answers:
        rows = answers_to_read(items, golds, held, args.seed)
        write_rows(args.export_answers, rows)
        print(f"{len(rows)} answers of held questions to read in {args.export_answers}")
        return
    second = agreement(held, read_labels(Path(args.recheck), "held"))
    print(f"a second reading of {second['items']} of them agrees on {second['agree']:.1%} (Cohen's kappa "
          f"{second['kappa']:.2f})")
    threshold = rag.abstain_threshold  # the shipped default's calibrated threshold
    supported_right = [shipped_score(it["f"]) for it in supported_only(items, read_labels(Path(args.provenance)))
                       if it["split"] == "test" and it["kind"] == "right"]
    right_read = read_labels(Path(args.answers), "right")
    held_right = [shipped_score(it["f"]) for kind in KINDS for it in unanswerable(items, kind)
                  if held[item_id(it["question"])] and right_read[item_id(it["question"])]]
    figures = {"threshold": threshold, "second_reading": second}
    for name, answerable, said in (("supported_right", supported_right, "right answers a passage supports"),
                                   ("with_held_right", supported_right + held_right,
                                    "right answers a passage supports or held questions answered right")):
        answered = [v >= threshold for v in answerable]
        figures[name] = {"questions": len(answered), "answered": round(share(answered), 3),
                         "ci": bootstrap(answered, args.seed)}
        print(f"test, the shipped calibration (threshold {threshold}) answers {share(answered):.1%} of the "
              f"{len(answered)} {said} (CI {figures[name]['ci'][0]:.1%}-{figures[name]['ci'][1]:.1%})")
    for kind in KINDS:
        rows, read = unanswerable(items, kind), unanswerable(items, kind, held)
        in_book = [it for it in rows if held[item_id(it["question"])]]
        taken = [it for it in in_book if shipped_score(it["f"]) >= threshold]
        figures[kind] = {"held": len(in_book), "held_answered": len(taken),
                         "held_right": sum(right_read[item_id(it["question"])] for it in in_book),
                         "held_answered_right": sum(right_read[item_id(it["question"])] for it in taken),
                         "string_matched": abstention(threshold, supported_right, rows, args.seed),
                         "read": abstention(threshold, supported_right, read, args.seed),
                         "read_both_sides_at_95_answered": curve_points(
                             supported_right + held_right, [shipped_score(it["f"]) for it in read])
                         .get("abstain_unanswerable_at_95_answered")}
        f = figures[kind]
        print(f"{kind}: {len(in_book)} of {len(rows)} questions have a passage that gives a gold answer; the model's "
              f"answer is right for {f['held_right']} of those, and the calibration answers {len(taken)}, "
              f"{f['held_answered_right']} of them right")
        for name in ("string_matched", "read"):
            print(f"  {name.replace('_', ' '):14s} abstains on {f[name]['abstained']:.1%} of {f[name]['questions']} "
                  f"(CI {f[name]['ci'][0]:.1%}-{f[name]['ci'][1]:.1%}); at 95% answered, any threshold: "
                  f"{f[name]['at_95_answered']:.1%}")
        print(f"  read, with the held questions answered right on the answerable side: at 95% answered, any "
              f"threshold: {f['read_both_sides_at_95_answered']:.1%}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
