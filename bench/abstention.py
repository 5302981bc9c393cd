"""Abstention of the shipped default: when should `openbook ask` say the knowledge base holds no answer?

The mixed set (issue 31 item 6):

* **answerable**: the questions of the NQ held-out fifth (``scripts/split_qa_data.py``: every fifth question of
  ``nq-open-oracle.dev-split.jsonl.gz``, never trained on) that the default answers right today (exact match, with
  ``openbook ask``'s own settings): those of ``--nq-report`` (the model card's report, made with them), checked
  against the bench's own answers;
* **unanswerable**: held-out WebQuestions and CuratedTrec questions (their held-out fifths, never trained on)
  whose answer is in none of the top k passages of the demo knowledge base (DPR's has_answer; CuratedTrec's
  patterns as regexes), a seeded sample as large as the answerable part.

For every question it asks it records the candidate signals: the top-1 retrieval score d(z)^T q(x) (MiniLM
cosine), the largest p(z|x), the answer's length-normalised log-likelihood log p(y|x) per token
(``Answer.logprob``), and ``combined``, the top score plus a weight times the log-likelihood (the direction of a
class-balanced logistic regression fitted on the calibration half). The answers are cached (``--work``, default
``$OPENBOOK_CACHE/bench/abstention``), so a second run only calibrates; ``--cached-only`` scores a partial cache.

The set is split in two halves (seeded, per part). On the calibration half, each signal's threshold is the
largest that still answers ``--keep`` of the answerable (the answerable scores' lower quantile); the signal that
abstains on most calibration unanswerable wins. Only then is the test half scored: the share of the answerable
still answered, of the unanswerable abstained on (with 95% bootstrap intervals), and the exact match of the NQ
test questions answered, before (all answered) and after abstention. The winner's ``logprob_weight`` belongs in
``openbook/presets.py`` and its ``threshold`` in the shipped default's ``run.json``.

Usage:  OMP_NUM_THREADS=1 PYTHONPATH=. python bench/abstention.py [--data-dir ../shared/data] [--work DIR]
        [--keep 0.97] [--cached-only]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import argparse
import gzip
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
from _common import print_header, quiet  # noqa: E402
from split_qa_data import split  # noqa: E402

SIGNALS = ("top_score", "top_prob", "logprob", "combined")  # combined: top_score + w * logprob


def load_sets(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """(the NQ held-out fifth, the WebQuestions + CuratedTrec held-out fifths), as ``{question, answers, mode}``."""
    with gzip.open(data_dir / "nq-open-oracle.dev-split.jsonl.gz", "rt", encoding="utf-8") as fh:
        nq = [{"question": r["question"], "answers": r["answers"], "mode": "dpr"} for r in map(json.loads, fh) if r]
    from openbook.eval.tasks.qa import CuratedTrecTask, WebQuestionsTask

    wq = json.loads((data_dir / "webquestions.train.json").read_text(encoding="utf-8"))
    other = []
    for record in split(wq)[1]:
        example = WebQuestionsTask().parse_record(record)
        other.append({"question": example.input, "answers": example.golds, "mode": "dpr"})
    ct = [line for line in (data_dir / "curatedtrec.train.tsv").read_text(encoding="utf-8").splitlines() if line]
    for lineno, line in split(list(enumerate(ct, 1)))[1]:
        example = CuratedTrecTask().parse_line(line, lineno)
        other.append({"question": example.input, "answers": example.golds, "mode": "regex"})
    return split(nq)[1], other


def unanswerable(rag, rows: list[dict], k: int) -> list[dict]:
    """The rows whose answer is in none of their top k passages."""
    from openbook.eval.retrieval import answer_in_passage

    kept = []
    for start in range(0, len(rows), 64):
        batch = rows[start: start + 64]
        found = rag.retrieve([r["question"] for r in batch], k).passages
        for row, passages in zip(batch, found):
            if not any(answer_in_passage(p.text, row["answers"], row["mode"]) for p in passages):
                kept.append(row)
    return kept


def answer_all(rag, rows: list[dict], cache: Path, k: int, batch_size: int, cached_only: bool) -> dict[str, dict]:
    """question -> ``{answer, top_score, top_prob, logprob}``, from ``cache`` (JSON Lines) or asked and appended."""
    done = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            done[record["question"]] = record
    todo = [r["question"] for r in rows if r["question"] not in done]
    todo = [] if cached_only else list(dict.fromkeys(todo))
    start = time.perf_counter()
    with open(cache, "a", encoding="utf-8") as fh:
        for i in range(0, len(todo), batch_size):
            for question, answer in zip(todo[i: i + batch_size], rag.ask(todo[i: i + batch_size], k=k)):
                record = {"question": question, "answer": answer.answer,
                          "top_score": max(p.score for p in answer.passages),
                          "top_prob": max(p.prob for p in answer.passages), "logprob": answer.logprob}
                done[question] = record
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"  asked {min(i + batch_size, len(todo))}/{len(todo)} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    return {r["question"]: done[r["question"]] for r in rows if r["question"] in done}


def interleave(*parts: list) -> list:
    return [row for group in itertools.zip_longest(*parts) for row in group if row is not None]


def logprob_weight(answerable: list[dict], unanswerable: list[dict], steps: int = 5000) -> float:
    """w of ``top_score + w * logprob``: the direction of a class-balanced logistic regression on the two
    (standardised) signals, fitted by gradient descent on the calibration half."""
    import numpy as np

    x = np.array([[r["top_score"], r["logprob"]] for r in answerable + unanswerable], dtype=np.float64)
    y = np.r_[np.ones(len(answerable)), np.zeros(len(unanswerable))]
    mean, std = x.mean(0), x.std(0)
    z = (x - mean) / std
    balance = np.where(y == 1, len(y) / (2 * len(answerable)), len(y) / (2 * len(unanswerable)))
    w, b = np.zeros(2), 0.0
    for _ in range(steps):
        g = (1 / (1 + np.exp(-(z @ w + b))) - y) * balance
        w -= 0.5 * z.T @ g / len(y)
        b -= 0.5 * g.mean()
    return float((w[1] / std[1]) / (w[0] / std[0]))


def halves(rows: list, seed: int) -> tuple[list, list]:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[: len(rows) // 2], rows[len(rows) // 2:]


def threshold_keeping(scores: list[float], keep: float) -> float:
    """The largest threshold t of 4 decimals (as shipped) with at least ``keep`` of ``scores`` >= t (answer when
    score >= t)."""
    ordered = sorted(scores)
    return math.floor(ordered[min(len(ordered) - 1, int((1.0 - keep) * len(ordered)))] * 1e4) / 1e4


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
    p.add_argument("--keep", type=float, default=0.97, help="share of calibration answerable to keep answering")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--nq-report", default=str(REPO / "docs" / "models" / "default" / "nq-fp32" / "report.json"),
                   help="the default's answers to the NQ fifth with ask's settings: which it answers right today")
    p.add_argument("--cached-only", action="store_true", help="use only the answers already cached (a partial run)")
    args = p.parse_args(argv)
    print_header()
    quiet()
    from openbook.eval.metrics.answers import exact_match
    from openbook.models.loading import cache_dir
    from openbook.rag import RAG
    from openbook.rag.abstain import combined_score

    work = Path(args.work) if args.work else cache_dir() / "bench" / "abstention"
    work.mkdir(parents=True, exist_ok=True)
    nq, other = load_sets(Path(args.data_dir))
    today = {p["input"]: p for p in json.loads(Path(args.nq_report).read_text(encoding="utf-8"))["predictions"]}
    right = today_right = {r["question"] for r in nq if today[r["question"]]["scores"]["exact_match"]}
    rag = RAG.load()  # the shipped default, as `openbook ask` loads it
    pool = unanswerable(rag, other, args.k)
    print(f"NQ held-out fifth: {len(nq)} questions, {len(right)} right today ({args.nq_report}); "
          f"{len(pool)} of {len(other)} WebQuestions/CuratedTrec held-out questions unanswerable", flush=True)
    random.Random(args.seed).shuffle(pool)
    pool = pool[: len(right)]  # as many unanswerable as answerable
    nq_cal, nq_test = halves(nq, args.seed)
    un_cal, un_test = halves(pool, args.seed + 1)
    # what the figures need, the two parts interleaved (so that a partial cache is balanced): the calibration
    # half's answerable and unanswerable, the test half's, then the test half's NQ questions answered wrong
    needed = interleave([r for r in nq_cal if r["question"] in right], un_cal,
                        [r for r in nq_test if r["question"] in right], un_test)
    needed += [r for r in nq_test if r["question"] not in right]
    got = answer_all(rag, needed, work / "answers.jsonl", args.k, args.batch_size, args.cached_only)
    nq_cal, nq_test, un_cal, un_test = ([r for r in rows if r["question"] in got]
                                        for rows in (nq_cal, nq_test, un_cal, un_test))
    changed = sum(got[r["question"]]["answer"] != today[r["question"]]["prediction"] for r in nq_cal + nq_test)
    print(f"answers differing from the report's: {changed} of {len(nq_cal) + len(nq_test)}")
    right = {r["question"] for r in nq_cal + nq_test if exact_match(got[r["question"]]["answer"], r["answers"])}
    figures: dict = {"k": args.k, "keep_target": args.keep, "nq": len(nq), "nq_right_today": len(today_right),
                     "unanswerable": len(pool), "answers_differing_from_report": changed}
    cal_answerable = [got[r["question"]] for r in nq_cal if r["question"] in right]
    weight = round(logprob_weight(cal_answerable, [got[r["question"]] for r in un_cal]), 4)  # as shipped
    for record in got.values():
        record["combined"] = combined_score(record["top_score"], record["logprob"], weight)
    figures["logprob_weight"] = round(weight, 4)
    chosen, best = None, -1.0
    print(f"\ncalibration half: {len(cal_answerable)} answerable, {len(un_cal)} unanswerable")
    for signal in SIGNALS:
        t = threshold_keeping([got[r["question"]][signal] for r in nq_cal if r["question"] in right], args.keep)
        abstain = share([got[r["question"]][signal] < t for r in un_cal])
        print(f"  {signal:10s} threshold {t:.4f}: abstains on {abstain:.1%} of the unanswerable")
        figures[f"calibration_{signal}"] = {"threshold": round(t, 4), "abstain_unanswerable": round(abstain, 3)}
        if abstain > best:
            chosen, best, threshold = signal, abstain, t

    kept = [got[r["question"]][chosen] >= threshold for r in nq_test if r["question"] in right]
    abstained = [got[r["question"]][chosen] < threshold for r in un_test]
    em_before = [bool(exact_match(got[r["question"]]["answer"], r["answers"])) for r in nq_test]
    em_after = [em for em, r in zip(em_before, nq_test) if got[r["question"]][chosen] >= threshold]
    figures.update(signal=chosen, threshold=round(threshold, 4), test_answerable=len(kept),
                   test_unanswerable=len(abstained), answered_right=round(share(kept), 3),
                   answered_right_ci=bootstrap(kept, args.seed), abstain_unanswerable=round(share(abstained), 3),
                   abstain_unanswerable_ci=bootstrap(abstained, args.seed),
                   nq_test=len(nq_test), nq_test_answered=len(em_after), em_before=round(share(em_before), 3),
                   em_after=round(share(em_after), 3))
    figures["meets_targets"] = figures["answered_right"] >= 0.95 and figures["abstain_unanswerable"] >= 0.70
    print(f"\ntest half, {chosen} < {threshold:.4f} abstains:")
    print(f"  answerable (right today) still answered: {sum(kept)}/{len(kept)} = {share(kept):.1%} "
          f"(95% CI {figures['answered_right_ci']})")
    print(f"  unanswerable abstained on:               {sum(abstained)}/{len(abstained)} = {share(abstained):.1%} "
          f"(95% CI {figures['abstain_unanswerable_ci']})")
    print(f"  NQ test questions: exact match {share(em_before):.1%} of {len(em_before)} answered before, "
          f"{share(em_after):.1%} of {len(em_after)} answered after")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
