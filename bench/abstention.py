"""Abstention of the shipped default: when should `openbook ask` say the knowledge base holds no answer?

Two sets of questions the shipped default never trained on:

* **development** (the held-out fifths of ``scripts/split_qa_data.py``; runs 1-4 used them all, so all of them
  now fit): *answerable*, the questions of the NQ fifth that the default answers right today (exact match, with
  `openbook ask`'s settings; the demo knowledge base holds every NQ question's gold passage) and, since run 7, the
  held-out WebQuestions and CuratedTrec questions it answers right today, so that a signal cannot tell the two
  sides apart by the style of their datasets; *unanswerable*, the held-out WebQuestions and CuratedTrec questions
  whose answer is in none of the top k passages of the demo knowledge base (DPR's has_answer; CuratedTrec's
  patterns as regexes). The signal is chosen, weighted and its threshold set here, and nowhere else.
* **test** (:func:`load_fresh`): the WebQuestions and CuratedTrec questions of the training parts that the
  default never trained on, fresh in run 5 (runs 6 and 7 scored on it too; nothing is fitted to it). *Answerable*: those with the answer in the top k that the
  default answers right today; *unanswerable*: those with the answer in none of the top k. Both sides are
  WebQuestions and CuratedTrec questions, so a signal that only told NQ's style of question from theirs would
  fail here.

The features of each answer are :func:`openbook.rag.abstain.abstain_features` (top retrieval score, log p(y|x) per
token, the p(z|x) of the passages containing the answer, its length in words, the share of the question's content
words the passages mention, the passage judge's best logit, and its best logit among the passages holding the
answer: ``scripts/train_judge.py`` trains the judge on the default's training questions only, none of either set).
The candidate signals: the top score alone, the log-likelihood alone, the judge alone, run 1's ``top + w *
logprob``, run 3's four features, run 5's five (``combined-5``), run 6's six (``combined-6``) and all seven
(``combined``). Each is scored on the development set
by repeated two-fold cross-validation (weights = the direction of a class-balanced logistic regression,
threshold = the largest keeping ``--keep`` of the fold's answerable); the one abstaining on most held-out-fold
unanswerable wins, is fitted on the whole development set, and only then is the test set scored: the share of
the answerable still answered, of the unanswerable abstained on (95% bootstrap intervals), and the exact match of
all the questions asked before (all answered) and after abstention.

Answers are cached (``--work``, default ``$OPENBOOK_CACHE/bench/abstention``; a second run only calibrates).
The winner's weights belong in ``openbook/presets.py`` (``ABSTAIN_WEIGHTS``) and its threshold in the shipped
default's ``run.json``.

Usage:  OMP_NUM_THREADS=1 PYTHONPATH=. python bench/abstention.py [--data-dir ../shared/data] [--work DIR]
        [--keep 0.97] [--cached-only]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from _common import nq_split, print_header, quiet  # noqa: E402
from split_qa_data import split  # noqa: E402

# candidate signals: the features each weighs (one alone: the feature itself)
SIGNALS = {"top_score": ("top_score",), "logprob": ("logprob",), "top+logprob": ("top_score", "logprob"),
           "judge": ("judge",), "combined-4": ("top_score", "logprob", "support", "words"),
           "combined-5": ("top_score", "logprob", "support", "words", "coverage"),
           "combined-6": ("top_score", "logprob", "support", "words", "coverage", "judge"),
           "combined": ("top_score", "logprob", "support", "words", "coverage", "judge", "judge_answer")}


def other_parts(data_dir: Path) -> tuple[tuple[list[dict], list[dict]], tuple[list[dict], list[dict]]]:
    """WebQuestions' and CuratedTrec's (training part, held-out fifth), each as ``{question, answers, mode}`` in
    ``scripts/split_qa_data.py``'s order."""
    from openbook.eval.tasks.qa import CuratedTrecTask, WebQuestionsTask

    wq = json.loads((data_dir / "webquestions.train.json").read_text(encoding="utf-8"))
    ct = [line for line in (data_dir / "curatedtrec.train.tsv").read_text(encoding="utf-8").splitlines() if line]
    wq_rows = [{"question": e.input, "answers": e.golds, "mode": "dpr"} for e in map(WebQuestionsTask().parse_record, wq)]
    ct_rows = [{"question": e.input, "answers": e.golds, "mode": "regex"}
               for e in (CuratedTrecTask().parse_line(line, n) for n, line in enumerate(ct, 1))]
    return split(wq_rows), split(ct_rows)


def load_sets(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """(the NQ held-out fifth, the WebQuestions + CuratedTrec held-out fifths), as ``{question, answers, mode}``."""
    nq = [{"question": r["question"], "answers": r["answers"], "mode": "dpr"} for r in nq_split(data_dir)[1]]
    (_, wq), (_, ct) = other_parts(data_dir)
    return nq, wq + ct


def load_fresh(data_dir: Path, nq_train: int) -> list[dict]:
    """The WebQuestions and CuratedTrec questions of the training parts that the shipped default never trained
    on (``scripts/split_qa_data.py`` trains on the first ``nq_train // 2`` of each), as ``{question, answers,
    mode}``: a test set no calibration has seen. A question whose text is also a trained or a held-out one (the
    sets repeat a few) is left out."""
    used = nq_train // 2
    (wq, wq_held), (ct, ct_held) = other_parts(data_dir)
    seen = {r["question"] for r in nq_split(data_dir)[1] + wq_held + ct_held + wq[:used] + ct[:used]}
    return [r for r in wq[used:] + ct[used:] if r["question"] not in seen]


def retrieve_all(rag, rows: list[dict], k: int, judged: Path | None = None) -> dict[str, list[tuple]]:
    """question -> its top k as ``(d(z)^T q(x), p(z|x), title, text)``, as `ask` reads them; with ``judged`` (a
    cache file of the logits, kept per judge file and dtype), the model's passage-judge logit of each as a fifth
    item (as `ask` judges them)."""
    out = {}
    for start in range(0, len(rows), 64):
        batch = [r["question"] for r in rows[start: start + 64]]
        found = rag.retrieve(batch, k)
        for question, passages, scores, logprobs in zip(batch, found.passages, found.scores.tolist(),
                                                        found.doc_logprobs.exp().tolist()):
            out[question] = [(s, p, z.title, z.text) for s, p, z in zip(scores, logprobs, passages)]
    judge = rag.passage_judge
    if judged is None or judge is None:
        return out
    import hashlib

    # the shipped default's judge (loaded from its file when first used) is known by its file's hash and its dtype
    key = f"{hashlib.sha256(judge.path.read_bytes()).hexdigest()[:16]}-{judge.dtype}"
    cache = judged.with_name(f"{judged.stem}-{key}{judged.suffix}")
    logits = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
    todo = [q for q in out if q not in logits]
    start_time = time.perf_counter()
    for start in range(0, len(todo), 64):
        batch = todo[start: start + 64]
        pairs = [(q, (title, text)) for q in batch for _, _, title, text in out[q]]
        scored = iter(judge.score([q for q, _ in pairs], [p for _, p in pairs]))
        for q in batch:
            logits[q] = [next(scored) for _ in out[q]]
        print(f"  judged {start + len(batch)}/{len(todo)} questions' passages ({time.perf_counter() - start_time:.0f} s)",
              flush=True)
    if todo:
        cache.write_text(json.dumps(logits), encoding="utf-8")
    return {q: [seen + (logit,) for seen, logit in zip(found, logits[q])] for q, found in out.items()}


def has_answer(row: dict, passages: list[tuple[float, float, str, str]]) -> bool:
    from openbook.eval.retrieval import answer_in_passage

    return any(answer_in_passage(seen[3], row["answers"], row["mode"]) for seen in passages)


def right(row: dict, answer: str) -> bool:
    from openbook.eval.metrics.answers import exact_match, regex_match

    return bool((regex_match if row["mode"] == "regex" else exact_match)(answer, row["answers"]))


def answer_all(rag, rows: list[dict], cache: Path, k: int, batch_size: int, cached_only: bool) -> dict[str, dict]:
    """question -> ``{answer, logprob, features}`` (the features as `ask` saw its passages), from ``cache`` (JSON
    Lines) or asked and appended."""
    from openbook.rag.abstain import abstain_features

    done = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            done[record["question"]] = record
    todo = [] if cached_only else list(dict.fromkeys(r["question"] for r in rows if r["question"] not in done))
    start = time.perf_counter()
    with open(cache, "a", encoding="utf-8") as fh:
        for i in range(0, len(todo), batch_size):
            for question, answer in zip(todo[i: i + batch_size], rag.ask(todo[i: i + batch_size], k=k)):
                seen = [(p.score, p.prob, p.title, p.text, p.judge) for p in answer.passages]
                record = {"question": question, "answer": answer.answer, "logprob": answer.logprob,
                          "features": abstain_features(question, answer.answer, seen, answer.logprob)}
                done[question] = record
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"  asked {min(i + batch_size, len(todo))}/{len(todo)} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    return {r["question"]: done[r["question"]] for r in rows if r["question"] in done}


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


def shipped_figures(threshold: float, answerable: list[dict], unanswerable: list[dict]) -> dict:
    """The shipped signal (``presets.ABSTAIN_SIGNAL`` and ``ABSTAIN_WEIGHTS``) at ``threshold`` on these features:
    the share of the unanswerable abstained on and of the answerable still answered."""
    from openbook.presets import ABSTAIN_SIGNAL, ABSTAIN_WEIGHTS
    from openbook.rag.abstain import combined_score

    def score(f):
        return f[ABSTAIN_SIGNAL] if ABSTAIN_SIGNAL in f else combined_score(f, ABSTAIN_WEIGHTS)

    return {"signal": ABSTAIN_SIGNAL, "weights": ABSTAIN_WEIGHTS, "threshold": threshold,
            "test_abstain_unanswerable": round(share([score(f) < threshold for f in unanswerable]), 3),
            "test_other_answered_right": round(share([score(f) >= threshold for f in answerable]), 3)}


def halves(rows: list, seed: int) -> tuple[list, list]:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[: len(rows) // 2], rows[len(rows) // 2:]


def threshold_keeping(scores: list[float], keep: float) -> float:
    """The largest threshold t of 4 decimals (as shipped) with at least ``keep`` of ``scores`` >= t (answer when
    score >= t)."""
    ordered = sorted(scores)
    return math.floor(ordered[min(len(ordered) - 1, int((1.0 - keep) * len(ordered)))] * 1e4) / 1e4


def cross_validate(name: str, answerable: list[dict], unanswerable: list[dict], keep: float,
                   rounds: int, seed: int) -> tuple[float, float]:
    """Mean (share of answerable kept, of unanswerable abstained on) over ``rounds`` seeded two-fold splits:
    fitted and thresholded on one half, scored on the other, both ways."""
    kept, abstained = [], []
    for r in range(rounds):
        a, u = halves(answerable, seed + 2 * r), halves(unanswerable, seed + 2 * r + 1)
        for fit, held in ((0, 1), (1, 0)):
            score, _ = signal_of(name, a[fit], u[fit])
            t = threshold_keeping([score(f) for f in a[fit]], keep)
            kept += [score(f) >= t for f in a[held]]
            abstained += [score(f) < t for f in u[held]]
    return share(kept), share(abstained)


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"), help="../shared/data's files")
    p.add_argument("--work", default=None, help="cache of answers (default: $OPENBOOK_CACHE/bench/abstention)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--keep", type=float, default=0.97, help="share of development answerable to keep answering")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=20, help="two-fold splits of the development set per signal")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--nq-report", default=str(REPO / "docs" / "models" / "default" / "nq-fp32" / "report.json"),
                   help="the default's answers to the NQ fifth with ask's settings: which it answers right today")
    p.add_argument("--cached-only", action="store_true", help="use only the answers already cached (a partial run)")
    args = p.parse_args(argv)
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
    nq_right = [r for r in nq if today[r["question"]]["scores"]["exact_match"]]
    rag = RAG.load()  # the shipped default, as `openbook ask` loads it
    passages = retrieve_all(rag, nq + other + fresh, args.k, judged=work / "judged.json")
    in_top_k = {r["question"]: has_answer(r, passages[r["question"]]) for r in other + fresh}
    dev_un = [r for r in other if not in_top_k[r["question"]]]
    dev_found = [r for r in other if in_top_k[r["question"]]]
    test_un = [r for r in fresh if not in_top_k[r["question"]]]
    test_found = [r for r in fresh if in_top_k[r["question"]]]
    print(f"development: {len(nq_right)} of the {len(nq)} NQ held-out questions right today ({args.nq_report}), "
          f"{len(dev_un)} of the {len(other)} held-out WebQuestions/CuratedTrec questions unanswerable and "
          f"{len(dev_found)} with the answer in the top {args.k}; test: "
          f"{len(fresh)} fresh WebQuestions/CuratedTrec questions, {len(test_un)} unanswerable and {len(test_found)} "
          f"with the answer in the top {args.k}", flush=True)
    # NQ's answerable and the unanswerable first (interleaved, so that a partial cache is balanced), then the test
    # set, then the rest of the development questions (the other answerable ones; exact match before and after)
    needed = interleave(nq_right, dev_un) + interleave(test_found, test_un)
    needed += [r for r in nq if r not in nq_right] + dev_found
    got = answer_all(rag, needed, work / "answers.jsonl", args.k, args.batch_size, args.cached_only)
    feats = {q: abstain_features(q, g["answer"], passages[q], g["logprob"]) for q, g in got.items()}
    changed = sum(got[r["question"]]["answer"] != today[r["question"]]["prediction"]
                  for r in nq if r["question"] in got)
    drift = max((abs(g["features"][n] - feats[q][n]) for q, g in got.items() if "features" in g
                 for n in g["features"]), default=0.0)
    print(f"NQ answers differing from the report's: {changed}; largest difference of a feature as ask saw it to "
          f"the bench's (passages retrieved again): {drift:.2g}")

    def answered_right(rows):
        return [feats[r["question"]] for r in rows if r["question"] in got and right(r, got[r["question"]]["answer"])]

    dev_nq, dev_other = answered_right(nq), answered_right(dev_found)
    dev_a, dev_u = dev_nq + dev_other, [feats[r["question"]] for r in dev_un if r["question"] in got]
    figures: dict = {"k": args.k, "keep_target": args.keep, "dev_answerable": len(dev_a),
                     "dev_answerable_nq": len(dev_nq), "dev_unanswerable": len(dev_u),
                     "nq_answers_differing_from_report": changed, "feature_drift": drift, "cross_validation": {}}
    print(f"\ndevelopment set, {args.rounds} two-fold splits, threshold keeping {args.keep:.0%} of the fitting half:")
    chosen, best = None, -1.0
    for name in SIGNALS:
        kept, abstain = cross_validate(name, dev_a, dev_u, args.keep, args.rounds, args.seed)
        print(f"  {name:12s} keeps {kept:.1%} of the answerable, abstains on {abstain:.1%} of the unanswerable")
        figures["cross_validation"][name] = {"answered_right": round(kept, 3),
                                             "abstain_unanswerable": round(abstain, 3)}
        if abstain > best:
            chosen, best = name, abstain
    score, weights = signal_of(chosen, dev_a, dev_u)
    threshold = threshold_keeping([score(f) for f in dev_a], args.keep)
    print(f"chosen: {chosen}, weights {weights}, threshold {threshold:.4f} (fitted on the whole development set)")
    dev_nq_kept, dev_other_kept = (share([score(f) >= threshold for f in part]) for part in (dev_nq, dev_other))
    print(f"  in the fit, still answered: {dev_nq_kept:.1%} of the {len(dev_nq)} NQ and {dev_other_kept:.1%} of the "
          f"{len(dev_other)} WebQuestions/CuratedTrec questions right today")

    test_rows = [r for r in fresh if r["question"] in got]
    test_a = answered_right(test_found)
    test_u = [feats[r["question"]] for r in test_un if r["question"] in got]
    kept = [score(f) >= threshold for f in test_a]
    abstained = [score(f) < threshold for f in test_u]
    em_before = [right(r, got[r["question"]]["answer"]) for r in test_rows]
    em_after = [em for em, r in zip(em_before, test_rows) if score(feats[r["question"]]) >= threshold]
    nq_asked = [r for r in nq if r["question"] in got]
    nq_before = [right(r, got[r["question"]]["answer"]) for r in nq_asked]
    nq_after = [em for em, r in zip(nq_before, nq_asked) if score(feats[r["question"]]) >= threshold]
    # how well each candidate, fitted on the whole development set, ranks the fresh test set (reported, never used
    # to choose): the chance that an answer right today scores above an unanswerable question
    figures["test_auc"] = {}
    for name in SIGNALS:
        rank, _ = signal_of(name, dev_a, dev_u)
        figures["test_auc"][name] = round(auc([rank(f) for f in test_a], [rank(f) for f in test_u]), 4)
    print("ranking of the fresh test set (AUC, right today above unanswerable; not used to choose): "
          + ", ".join(f"{name} {value:.3f}" for name, value in figures["test_auc"].items()))
    figures["test_curve"] = curve_points([score(f) for f in test_a], [score(f) for f in test_u])
    print(f"its curve on the test set: answering 95% of the right answers abstains on "
          f"{figures['test_curve']['abstain_unanswerable_at_95_answered']:.1%} of the unanswerable; abstaining on 70% "
          f"of those answers {figures['test_curve']['answered_right_at_70_abstained']:.1%} of the right ones")
    cv = figures["cross_validation"][chosen]
    figures.update(signal=chosen, weights=weights, threshold=threshold,
                   answered_right=cv["answered_right"], abstain_unanswerable=cv["abstain_unanswerable"],
                   dev_nq_answered_right=round(dev_nq_kept, 3), dev_other_answered_right=round(dev_other_kept, 3),
                   test_unanswerable=len(abstained), test_abstain_unanswerable=round(share(abstained), 3),
                   test_abstain_unanswerable_ci=bootstrap(abstained, args.seed),
                   test_other_answerable=len(kept), test_other_answered_right=round(share(kept), 3),
                   test_other_answered_right_ci=bootstrap(kept, args.seed),
                   nq_asked=len(nq_before), nq_answered=len(nq_after), nq_em_before=round(share(nq_before), 3),
                   nq_em_after=round(share(nq_after), 3), test_asked=len(em_before), test_answered=len(em_after),
                   test_em_before=round(share(em_before), 3), test_em_after=round(share(em_after), 3))
    # the calibration the default ships with, on this run's answers: what `openbook ask` does today, whether or
    # not this run's fit differs from it
    if rag.abstain_threshold is not None:
        figures["shipped"] = shipped_figures(rag.abstain_threshold, test_a, test_u)
        print(f"shipped calibration (threshold {rag.abstain_threshold}) on this run's test answers: abstains on "
              f"{figures['shipped']['test_abstain_unanswerable']:.1%} of the unanswerable, answers "
              f"{figures['shipped']['test_other_answered_right']:.1%} of those right today")
    figures["meets_targets"] = (cv["answered_right"] >= 0.95 and cv["abstain_unanswerable"] >= 0.70
                                and figures["test_abstain_unanswerable"] >= 0.70
                                and figures["test_other_answered_right"] >= 0.95)
    print(f"\nheld out (cross-validated above): answers {cv['answered_right']:.1%} of the questions right today, "
          f"abstains on {cv['abstain_unanswerable']:.1%} of the unanswerable")
    print(f"test set (fresh), {chosen} < {threshold:.4f} abstains:")
    print(f"  unanswerable abstained on: {sum(abstained)}/{len(abstained)} = {share(abstained):.1%} "
          f"(95% CI {figures['test_abstain_unanswerable_ci']})")
    print(f"  questions right today, still answered: {sum(kept)}/{len(kept)} = "
          f"{share(kept):.1%} (95% CI {figures['test_other_answered_right_ci']})")
    print(f"  all {len(em_before)} test questions: exact match {share(em_before):.1%} answering all, "
          f"{share(em_after):.1%} of the {len(em_after)} answered")
    print(f"  the NQ fifth (its right answers in the fit): exact match {share(nq_before):.1%} of "
          f"{len(nq_before)} answering all, {share(nq_after):.1%} of the {len(nq_after)} answered")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
