"""Abstention of the shipped default: when should `openbook ask` say the knowledge base holds no answer?

Two sets of questions the shipped default never trained on, each with two kinds of unanswerable question
(``bench/_abstention_sets.py``):

* **development** (the held-out fifths of ``scripts/split_qa_data.py``; runs 1-4 used them all, so all of them
  now fit): *answerable*, the questions of the NQ fifth and the held-out WebQuestions and CuratedTrec questions
  that the default answers right today (exact match, with `openbook ask`'s settings; the demo knowledge base
  holds every NQ question's gold passage, and the others' answers only by chance); *unanswerable*, (1) *absent*:
  the held-out WebQuestions and CuratedTrec questions whose answer is in none of the top k passages of the demo
  book (DPR's has_answer; CuratedTrec's patterns as regexes), a label that string matching makes noisy (a
  WebQuestions answer is a Freebase name), and (2) *deleted* (since run 8): the NQ fifth and the held-out
  WebQuestions/CuratedTrec questions with an answer in the top k, asked of a copy of the demo book from which
  every passage holding their answers is deleted: the same questions as the answerable side, no label noise. The
  signal is chosen, weighted and its threshold set here, and nowhere else.
* **test** (:func:`load_fresh`): the WebQuestions and CuratedTrec questions of the training parts that the
  default never trained on, fresh in run 5 (runs 6-8 scored on it too; nothing is fitted to it). *Answerable*:
  those with the answer in the top k that the default answers right today; *unanswerable*: (1) those with the
  answer in none of the top k, (2) those with the answer in the top k, asked of their own copy of the book
  without their answers.

The features of each answer are :func:`openbook.rag.abstain.abstain_features` (top retrieval score, log p(y|x) per
token, the p(z|x) of the passages containing the answer, its length in words, the share of the question's content
words the passages mention, the passage judge's best logit, its best logit among the passages holding the
answer (``scripts/train_judge.py`` trains the judge on the default's training questions only, none of either set),
and the share of the question's content words the passage holding the answer mentions). The candidate signals: the
top score alone, the log-likelihood alone, the judge alone, run 1's ``top + w * logprob``, run 3's four features,
run 5's five (``combined-5``), run 6's six (``combined-6``), run 7's seven (``combined-7``) and all eight
(``combined``, run 14). Each is scored on the development set by repeated two-fold cross-validation, split by question
(weights = the direction of a class-balanced logistic regression, threshold = the largest keeping ``--keep`` of
the fold's right answers); the one abstaining on most held-out-fold unanswerable of both kinds wins, is fitted
on the whole development set, and only then is the test set scored: the share of the right answers still
answered, of each kind of unanswerable abstained on (95% bootstrap intervals), and the exact match of all the
questions asked before (all answered) and after abstention.

Answers, judge logits and the deleted-answer books are cached (``--work``, default
``$OPENBOOK_CACHE/bench/abstention``; a second run only calibrates). ``--judge FILE`` calibrates with a candidate
passage judge (``scripts/train_judge.py``) in place of the shipped one. ``--labels FILE`` (run 13 on) takes the
right answers today that no passage supports off the answerable side, on both sets, by the provenance labels of
``bench/abstention_provenance.py``: the target's "questions the knowledge base answers". The winner's weights belong in
``openbook/presets.py`` (``ABSTAIN_WEIGHTS``) and its threshold (with the judge's file) in the shipped default's
``run.json``.

Usage:  OMP_NUM_THREADS=1 PYTHONPATH=. python bench/abstention.py [--data-dir ../shared/data] [--work DIR]
        [--keep 0.97] [--max-passages 50] [--cached-only] [--judge FILE] [--labels FILE]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from _abstention_sets import (  # noqa: E402
    answer_all,
    has_answer,
    judge_all,
    load_fresh,
    load_sets,
    read_labels,
    retrieve_all,
    right,
    supported,
    without_answers,
)
from _common import nq_split, print_header, quiet  # noqa: E402

# candidate signals: the features each weighs (one alone: the feature itself)
SIGNALS = {"top_score": ("top_score",), "logprob": ("logprob",), "top+logprob": ("top_score", "logprob"),
           "judge": ("judge",), "combined-4": ("top_score", "logprob", "support", "words"),
           "combined-5": ("top_score", "logprob", "support", "words", "coverage"),
           "combined-6": ("top_score", "logprob", "support", "words", "coverage", "judge"),
           "combined-7": ("top_score", "logprob", "support", "words", "coverage", "judge", "judge_answer"),
           "combined": ("top_score", "logprob", "support", "words", "coverage", "judge", "judge_answer",
                        "answer_coverage")}


def interleave(*parts: list) -> list:
    return [row for group in itertools.zip_longest(*parts) for row in group if row is not None]


def fit_weights(answerable: list[dict], unanswerable: list[dict], names: tuple[str, ...],
                steps: int = 5000) -> dict[str, float]:
    """The weights of ``names`` (per unit of each feature): the direction of a class-balanced logistic regression
    on the (standardised) features, fitted by gradient descent; the intercept is the threshold's to set."""
    import numpy as np

    x = np.array([[f[c] for c in names] for f in answerable + unanswerable], dtype=np.float64)
    y = np.r_[np.ones(len(answerable)), np.zeros(len(unanswerable))]
    mean, std = x.mean(0), x.std(0) + 1e-12
    z = (x - mean) / std
    balance = np.where(y == 1, len(y) / (2 * len(answerable)), len(y) / (2 * len(unanswerable)))
    w, b = np.zeros(len(names)), 0.0
    for _ in range(steps):
        g = (1 / (1 + np.exp(-(z @ w + b))) - y) * balance
        w -= 0.5 * z.T @ g / len(y)
        b -= 0.5 * g.mean()
    return {name: round(float(weight), 4) for name, weight in zip(names, w / std)}  # 4 decimals, as shipped


def signal_of(name: str, answerable: list[dict], unanswerable: list[dict]):
    """(features -> score, the weights) of candidate ``name`` fitted on the two lists."""
    from openbook.rag.abstain import combined_score

    if len(SIGNALS[name]) == 1:
        return (lambda f: f[name]), {}
    weights = fit_weights(answerable, unanswerable, SIGNALS[name])
    return (lambda f: combined_score(f, weights)), weights


def shipped_score(f: dict) -> float:
    """The shipped signal (``presets.ABSTAIN_SIGNAL`` and ``ABSTAIN_WEIGHTS``) of one answer's features."""
    from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS
    from openbook.rag.abstain import combined_score

    return f[ABSTAIN_SIGNAL] if ABSTAIN_SIGNAL in f else combined_score(f, ABSTAIN_WEIGHTS)


def shipped_figures(threshold: float, answerable: list[dict], unanswerable: list[dict]) -> dict:
    """The shipped signal at ``threshold`` on these features: the share of the unanswerable abstained on and of the
    answerable still answered."""
    from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS

    return {"signal": ABSTAIN_SIGNAL, "weights": ABSTAIN_WEIGHTS, "threshold": threshold,
            "test_abstain_unanswerable": round(share([shipped_score(f) < threshold for f in unanswerable]), 3),
            "test_other_answered_right": round(share([shipped_score(f) >= threshold for f in answerable]), 3)}


def folds(keys: list, seed: int, n: int = 2) -> dict:
    """Each distinct key -> its fold, 0 to ``n - 1``, the same share of the keys each (seeded)."""
    distinct = sorted(set(keys), key=str)
    random.Random(seed).shuffle(distinct)
    return {key: i % n for i, key in enumerate(distinct)}


def threshold_keeping(scores: list[float], keep: float) -> float:
    """The largest threshold t of 4 decimals (as shipped) with at least ``keep`` of ``scores`` >= t (answer when
    score >= t)."""
    ordered = sorted(scores)
    return math.floor(ordered[min(len(ordered) - 1, int((1.0 - keep) * len(ordered)))] * 1e4) / 1e4


def cross_validate(name: str, answerable: list[dict], unanswerable: list[dict], keep: float, rounds: int,
                   seed: int, keys: tuple[list, list] | None = None) -> tuple[list[float], list[float]]:
    """Over ``rounds`` seeded two-fold splits, fitted and thresholded on one half and scored on the other, both
    ways: the share of rounds each of ``answerable`` was kept and each of ``unanswerable`` was abstained on.
    ``keys`` (one list per side) name each item's question, and a question's items fall in one fold (the same
    question asked of two books); by default each item is its own."""
    keys_a, keys_u = keys or ([("a", i) for i in range(len(answerable))], [("u", i) for i in range(len(unanswerable))])
    kept, abstained = [0] * len(answerable), [0] * len(unanswerable)
    for r in range(rounds):
        fold = folds(keys_a + keys_u, seed + r)
        for part in (0, 1):
            score, _ = signal_of(name, [f for f, key in zip(answerable, keys_a) if fold[key] == part],
                                 [f for f, key in zip(unanswerable, keys_u) if fold[key] == part])
            t = threshold_keeping([score(f) for f, key in zip(answerable, keys_a) if fold[key] == part], keep)
            for i, (f, key) in enumerate(zip(answerable, keys_a)):
                kept[i] += fold[key] != part and score(f) >= t
            for i, (f, key) in enumerate(zip(unanswerable, keys_u)):
                abstained[i] += fold[key] != part and score(f) < t
    return [n / rounds for n in kept], [n / rounds for n in abstained]


def auc(higher: list[float], lower: list[float]) -> float:
    """The chance that a random score of ``higher`` exceeds a random one of ``lower`` (ties count half): how well a
    signal ranks, whatever its threshold."""
    ranked = sorted([(v, 1) for v in higher] + [(v, 0) for v in lower])
    wins, seen_lower, i = 0.0, 0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        tied_lower = sum(1 - label for _, label in ranked[i:j])
        wins += sum(label for _, label in ranked[i:j]) * (seen_lower + tied_lower / 2)
        seen_lower += tied_lower
        i = j
    return wins / (len(higher) * len(lower)) if higher and lower else float("nan")


def curve_points(answerable: list[float], unanswerable: list[float], keep: float = 0.95,
                 abstain: float = 0.70) -> dict[str, float]:
    """Where a signal's curve meets the issue's two targets, thresholds set on these scores themselves (what any
    threshold could reach, not a calibration): the share of ``unanswerable`` abstained on when ``keep`` of
    ``answerable`` is still answered, and the share of ``answerable`` answered when ``abstain`` of
    ``unanswerable`` is abstained on."""
    if not answerable or not unanswerable:
        return {}
    at_keep = threshold_keeping(answerable, keep)
    at_abstain = sorted(unanswerable)[math.ceil(abstain * len(unanswerable)) - 1]  # abstain on it and all below
    return {f"abstain_unanswerable_at_{keep * 100:.0f}_answered": round(share([v < at_keep for v in unanswerable]), 3),
            f"answered_right_at_{abstain * 100:.0f}_abstained": round(share([v > at_abstain for v in answerable]), 3)}


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def bootstrap(flags: list[bool], seed: int, rounds: int = 2000) -> list[float]:
    """95% percentile bootstrap interval of the share of True in ``flags``."""
    rng = random.Random(seed)
    n = len(flags)
    means = sorted(sum(flags[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return [round(means[int(0.025 * rounds)], 3), round(means[int(0.975 * rounds) - 1], 3)]


def by_kind(rates: list[float], kinds: list[str]) -> dict[str, float]:
    """The mean of ``rates`` over all and over each kind."""
    out = {"all": round(share(rates), 3)}
    for kind in dict.fromkeys(kinds):
        out[kind] = round(share([v for v, k in zip(rates, kinds) if k == kind]), 3)
    return out


def set_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the options of the question sets and their cross-validation, which bench/abstention.py and
    bench/abstention_signals.py share."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"), help="../shared/data's files")
    p.add_argument("--work", default=None, help="cache of answers (default: $OPENBOOK_CACHE/bench/abstention)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--keep", type=float, default=0.97, help="share of development answerable to keep answering")
    p.add_argument("--max-passages", type=int, default=50,
                   help="deleted-answer questions: leave out those whose answers are in more passages than this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=20, help="two-fold splits of the development set per signal")
    return p


def main(argv=None) -> None:
    p = set_arguments(__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--nq-report", default=str(REPO / "docs" / "models" / "default" / "nq-fp32" / "report.json"),
                   help="the default's answers to the NQ fifth as the model card has them (a check of the cache)")
    p.add_argument("--cached-only", action="store_true", help="use only the answers already cached (a partial run)")
    p.add_argument("--judge", default=None,
                   help="a candidate passage judge's file to calibrate with in place of the shipped one's")
    p.add_argument("--labels", default=None, metavar="FILE",
                   help="provenance labels (bench/abstention_provenance.py): the right answers no passage supports "
                        "leave the answerable side")
    args = p.parse_args(argv)
    labels = read_labels(Path(args.labels)) if args.labels else None
    print_header()
    quiet()
    from openbook.models.loading import cache_dir
    from openbook.rag import RAG
    from openbook.rag.abstain import abstain_features

    work = Path(args.work) if args.work else cache_dir() / "bench" / "abstention"
    work.mkdir(parents=True, exist_ok=True)
    data_dir = Path(args.data_dir)
    nq, other = load_sets(data_dir)
    fresh = load_fresh(data_dir, len(nq_split(data_dir)[0]))
    today = {p["input"]: p for p in json.loads(Path(args.nq_report).read_text(encoding="utf-8"))["predictions"]}
    rag = RAG.load()  # the shipped default, as `openbook ask` loads it
    if args.judge:  # a candidate judge, in the dtype `ask` would run it in
        from openbook.models.judge import LazyJudge

        rag.use_judge(LazyJudge(args.judge, dtype=getattr(rag.passage_judge, "dtype", "float32")))
    passages = retrieve_all(rag, nq + other + fresh, args.k)
    in_top_k = {r["question"]: has_answer(r, passages[r["question"]]) for r in other + fresh}
    dev_un = [r for r in other if not in_top_k[r["question"]]]
    dev_found = [r for r in other if in_top_k[r["question"]]]
    test_un = [r for r in fresh if not in_top_k[r["question"]]]
    test_found = [r for r in fresh if in_top_k[r["question"]]]
    print(f"development: the {len(nq)} NQ held-out questions; of the {len(other)} held-out WebQuestions/CuratedTrec "
          f"questions {len(dev_un)} with no answer in the top {args.k} and {len(dev_found)} with one; test: "
          f"{len(fresh)} fresh WebQuestions/CuratedTrec questions, {len(test_un)} with no answer in the top {args.k} "
          f"and {len(test_found)} with one", flush=True)
    # interleaved, so that a partial cache is balanced
    needed = interleave(nq, dev_un) + interleave(test_found, test_un) + dev_found
    got = answer_all(rag, needed, work / "answers.jsonl", args.k, args.batch_size, args.cached_only)
    passages = judge_all(rag, passages, {q: g["answer"] for q, g in got.items()}, work / "judged.json")
    feats = {q: abstain_features(q, g["answer"], passages[q], g["logprob"]) for q, g in got.items()}
    changed = sum(got[r["question"]]["answer"] != today[r["question"]]["prediction"]
                  for r in nq if r["question"] in got)
    drift = max((abs(g["features"][n] - feats[q][n]) for q, g in got.items() if "features" in g
                 for n in g["features"]), default=0.0)
    print(f"NQ answers differing from the model card's report: {changed}; largest difference of a feature as ask "
          f"saw it to the bench's (passages retrieved again): {drift:.2g}")
    deleted, counts = {}, {}
    for name, rows in (("nq", nq), ("dev", dev_found), ("test", test_found)):
        deleted[name], counts[name] = without_answers(rag, rows, name, work, args.k, args.batch_size,
                                                      args.max_passages, args.cached_only)
        print(f"deleted-answer questions ({name}): {counts[name]}", flush=True)

    def right_ones(rows):
        return [r["question"] for r in rows if r["question"] in got and right(r, got[r["question"]]["answer"])]

    # development: answerable = right today over the whole book; unanswerable = both kinds (module docs)
    nq_right = supported(right_ones(nq), labels)
    dev_keys_a = nq_right + supported(right_ones(dev_found), labels)
    dev_items = ([(r["question"], feats[r["question"]], "absent") for r in dev_un if r["question"] in got]
                 + [(q, f, "deleted") for name in ("nq", "dev") for q, f in deleted[name].items()])
    dev_a, dev_u = [feats[q] for q in dev_keys_a], [f for _, f, _ in dev_items]
    kinds = [kind for _, _, kind in dev_items]
    nq_questions = {r["question"] for r in nq}
    groups_a = ["NQ" if q in nq_questions else "WQ/CT" for q in dev_keys_a]
    groups_u = [kind if kind == "absent" else f"deleted {'NQ' if q in nq_questions else 'WQ/CT'}"
                for q, _, kind in dev_items]
    keys = (dev_keys_a, [q for q, _, _ in dev_items])
    figures: dict = {"k": args.k, "keep_target": args.keep, "max_passages": args.max_passages, "labels": args.labels,
                     "dev_answerable": len(dev_a), "dev_answerable_nq": len(nq_right),
                     "dev_unanswerable": {kind: kinds.count(kind) for kind in ("absent", "deleted")},
                     "deleted_answers": counts,
                     "nq_answers_differing_from_report": changed, "feature_drift": drift, "cross_validation": {}}
    print(f"\ndevelopment set: {len(dev_a)} right today ({len(nq_right)} NQ), {kinds.count('absent')} with no "
          f"answer in the top {args.k}, {kinds.count('deleted')} deleted-answer; {args.rounds} two-fold splits by "
          f"question, threshold keeping {args.keep:.0%} of the fitting half's right answers:")
    chosen, best = None, -1.0
    for name in SIGNALS:
        kept_rates, rates = cross_validate(name, dev_a, dev_u, args.keep, args.rounds, args.seed, keys)
        kept, abstain = share(kept_rates), by_kind(rates, kinds)
        print(f"  {name:12s} keeps {kept:.1%} of the right answers, abstains on {abstain['all']:.1%} of the "
              f"unanswerable: {abstain['absent']:.1%} no answer in the top {args.k}, {abstain['deleted']:.1%} "
              f"deleted-answer")
        figures["cross_validation"][name] = {"answered_right": round(kept, 3), "abstain": abstain}
        if abstain["all"] > best:
            chosen, best = name, abstain["all"]
            groups = {"answered_right": by_kind(kept_rates, groups_a), "abstain": by_kind(rates, groups_u)}
    score, weights = signal_of(chosen, dev_a, dev_u)
    threshold = threshold_keeping([score(f) for f in dev_a], args.keep)
    print(f"chosen: {chosen}, weights {weights}, threshold {threshold:.4f} (fitted on the whole development set)")
    print("  its cross-validated figures by dataset: right answers kept "
          + ", ".join(f"{g} {v:.1%}" for g, v in groups["answered_right"].items() if g != "all") + "; abstained on "
          + ", ".join(f"{g} {v:.1%}" for g, v in groups["abstain"].items() if g != "all"))
    figures["cross_validation_by_dataset"] = groups

    # test: fresh questions, nothing fitted to them
    test_a = [feats[q] for q in supported(right_ones(test_found), labels)]
    test_all = [feats[q] for q in right_ones(test_found)]  # with labels, the unsupported right answers too
    test_u = {"absent": [feats[r["question"]] for r in test_un if r["question"] in got],
              "deleted": list(deleted["test"].values())}
    kept = [score(f) >= threshold for f in test_a]
    abstained = {kind: [score(f) < threshold for f in rows] for kind, rows in test_u.items()}
    figures["test_auc"] = {kind: {} for kind in test_u}
    for name in SIGNALS:
        rank, _ = signal_of(name, dev_a, dev_u)
        for kind, rows in test_u.items():
            figures["test_auc"][kind][name] = round(auc([rank(f) for f in test_a], [rank(f) for f in rows]), 4)
    figures["test_curve"] = {kind: curve_points([score(f) for f in test_a], [score(f) for f in rows])
                             for kind, rows in test_u.items()}
    test_rows = [r for r in fresh if r["question"] in got]
    em_before = [right(r, got[r["question"]]["answer"]) for r in test_rows]
    em_after = [em for em, r in zip(em_before, test_rows) if score(feats[r["question"]]) >= threshold]
    nq_asked = [r for r in nq if r["question"] in got]
    nq_before = [right(r, got[r["question"]]["answer"]) for r in nq_asked]
    nq_after = [em for em, r in zip(nq_before, nq_asked) if score(feats[r["question"]]) >= threshold]
    cv = figures["cross_validation"][chosen]
    figures.update(signal=chosen, weights=weights, threshold=threshold, answered_right=cv["answered_right"],
                   abstain=cv["abstain"], test_answerable=len(kept), test_answered_right=round(share(kept), 3),
                   test_answered_right_ci=bootstrap(kept, args.seed),
                   test_answered_right_all=round(share([score(f) >= threshold for f in test_all]), 3),
                   test_unanswerable={kind: len(flags) for kind, flags in abstained.items()},
                   test_abstain={kind: round(share(flags), 3) for kind, flags in abstained.items()},
                   test_abstain_ci={kind: bootstrap(flags, args.seed) for kind, flags in abstained.items()},
                   nq_asked=len(nq_before), nq_answered=len(nq_after), nq_em_before=round(share(nq_before), 3),
                   nq_em_after=round(share(nq_after), 3), test_asked=len(em_before), test_answered=len(em_after),
                   test_em_before=round(share(em_before), 3), test_em_after=round(share(em_after), 3))
    print("ranking of the fresh test set (AUC, right today above unanswerable; not used to choose):")
    for kind, values in figures["test_auc"].items():
        print(f"  {kind:8s} " + ", ".join(f"{name} {value:.3f}" for name, value in values.items()))
    for kind, points in figures["test_curve"].items():
        print(f"its curve on the test set ({kind}): answering 95% of the right answers abstains on "
              f"{points['abstain_unanswerable_at_95_answered']:.1%}; abstaining on 70% answers "
              f"{points['answered_right_at_70_abstained']:.1%} of the right ones")
    # the calibration the default ships with, on this run's answers: what `openbook ask` does today
    if rag.abstain_threshold is not None and not args.judge:
        figures["shipped"] = {kind: shipped_figures(rag.abstain_threshold, test_a, rows)
                              for kind, rows in test_u.items()}
        print(f"shipped calibration (threshold {rag.abstain_threshold}) on this run's test answers: "
              + "; ".join(f"{kind}: abstains on {f['test_abstain_unanswerable']:.1%}, answers "
                          f"{f['test_other_answered_right']:.1%} of those right today"
                          for kind, f in figures["shipped"].items()))
    figures["meets_targets"] = {kind: (cv["answered_right"] >= 0.95 and cv["abstain"][kind] >= 0.70
                                       and figures["test_abstain"][kind] >= 0.70
                                       and figures["test_answered_right"] >= 0.95) for kind in test_u}
    print(f"\nheld out (cross-validated above): answers {cv['answered_right']:.1%} of the questions right today, "
          f"abstains on {cv['abstain']['absent']:.1%} with no answer in the top {args.k} and "
          f"{cv['abstain']['deleted']:.1%} deleted-answer")
    print(f"test set (fresh), {chosen} < {threshold:.4f} abstains:")
    for kind, flags in abstained.items():
        print(f"  unanswerable ({kind}) abstained on: {sum(flags)}/{len(flags)} = {share(flags):.1%} "
              f"(95% CI {figures['test_abstain_ci'][kind]})")
    print(f"  questions right today{', supported by a passage,' if labels else ''} still answered: "
          f"{sum(kept)}/{len(kept)} = {share(kept):.1%} (95% CI {figures['test_answered_right_ci']})"
          + (f"; of all {len(test_all)} right today: {figures['test_answered_right_all']:.1%}" if labels else ""))
    print(f"  all {len(em_before)} test questions: exact match {share(em_before):.1%} answering all, "
          f"{share(em_after):.1%} of the {len(em_after)} answered")
    print(f"  the NQ fifth (its right answers in the fit): exact match {share(nq_before):.1%} of "
          f"{len(nq_before)} answering all, {share(nq_after):.1%} of the {len(nq_after)} answered")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
