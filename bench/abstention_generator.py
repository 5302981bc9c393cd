"""Abstention by the generator: can the default be taught to say that its passages hold no answer?

``bench/abstention.py`` and ``bench/abstention_signals.py`` score signals read off the shipped default's answers. This
bench scores a *candidate generator* trained to answer ``--abstain-text`` ("not in the passages") where its
passages hold no answer: ``scripts/train_default.sh abstain-init`` continues the shipped default's adapters on its
answerable training questions and, as many at most, training questions with no answer in the top 5 whose target
is that text (``scripts/answerable.py --abstain``; none of them is in either set below). On
``bench/abstention.py``'s sets and cached items (run it first; ``bench/abstention_signals.py``'s ``collect``):

* **the abstention score**: log p(abstain text | x) per token under the candidate's RAG-Sequence marginal over
  each item's own top k (paper eq. 1, p(z|x) with the candidate's score scale; a deleted-answer item's passages
  come from its own book), for every item;
* **the candidate's answers** (``openbook ask``'s settings) to the questions the shipped default answers right
  today, to the whole NQ fifth, and to a seeded sample of ``--sample`` unanswerable questions of each kind and
  split (asked of their own book): which right answers it keeps, its exact match, and how often its greedy answer
  is the abstain text.

A right answer counts as kept only when the candidate still answers it right *and* its score is over the
threshold, so a right answer the candidate lost is lost at every threshold. The figures: the AUC of the
abstention score alone, right-and-still-right above unanswerable; the test set's abstention at 95% of all its
right answers kept (thresholds set on the test set itself, what any threshold could reach; none when fewer than
95% are still right); and the shipped six features plus the candidate's score, cross-validated on the
development set as ``bench/abstention.py`` does. Each signal is scored twice: with the candidate's answers, and
*judging* the shipped default's answers (the shipped default answers, the candidate's score only decides whether
to give the answer; every right answer today is then still right). The rule for the candidate to be worth
shipping was fixed before its first run: cross-validated, its score (alone or beside the six) answers at least 95%
of the right answers and abstains on more of the unanswerable than the shipped signal, as
``bench/abstention_signals.py``'s rule; shipping it would then also need the model card's figures measured again.

Usage:  OMP_NUM_THREADS=2 PYTHONPATH=. python bench/abstention_generator.py [--run runs/default-abstain-init]
        [--data-dir ../shared/data] [--work DIR] [--sample 100]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from _abstention_sets import answer_all, load_fresh, load_sets, right  # noqa: E402
from _common import nq_split  # noqa: E402
from abstention import SIGNALS, auc, by_kind, cross_validate, set_arguments, share, signal_of  # noqa: E402
from abstention_signals import shipped_items  # noqa: E402

ABSTAIN_TEXT = "not in the passages"
SHIPPED = SIGNALS["combined-6"]  # run 9's six, the shipped signal when run 12 ran (its log)


def abstain_logprob(rag, items: list[dict], text: str, batch_size: int = 8) -> np.ndarray:
    """For each item: log p(``text`` + EOS | x) per token under RAG-Sequence's marginal over the item's passages
    (``(score, p, title, text, ...)`` tuples), log sum_z p(z|x) p(y|x,z) with p(z|x) = softmax(s * score) at the
    model's score scale s."""
    import torch

    from openbook.corpus.passages import Passage
    from openbook.index.retriever import retrieval_logprobs

    gen = rag.generator
    targets, mask = gen.encode_targets([text])
    n = int(mask[0].sum())
    out = np.zeros(len(items))
    start = time.perf_counter()
    s = 0
    with torch.inference_mode():
        while s < len(items):
            batch = items[s: s + batch_size]
            k = len(batch[0]["passages"])
            batch = batch[: next((i for i, it in enumerate(batch) if len(it["passages"]) != k), len(batch))]
            passages = [[Passage(id="", title=p[2], text=p[3]) for p in it["passages"]] for it in batch]
            memory = gen.encode(gen.contexts([it["question"] for it in batch], passages))
            rows = torch.arange(len(batch) * k, device=targets.device)
            per_doc = gen.target_token_logprobs(memory, rows, targets.expand(len(rows), -1))[:, :n].sum(-1)
            scores = torch.tensor([[p[0] for p in it["passages"]] for it in batch], dtype=torch.float32)
            prior = retrieval_logprobs(scores, rag.score_scale.detach().float().cpu())
            joint = prior + per_doc.float().cpu().view(len(batch), k)
            out[s: s + len(batch)] = (torch.logsumexp(joint, -1) / n).numpy()
            if (s // batch_size) % 50 == 0:
                print(f"  scored {s + len(batch)}/{len(items)} ({time.perf_counter() - start:.0f} s)", flush=True)
            s += len(batch)  # a batch ends where the size of the top k changes
    return out


def item_key(it: dict) -> str:
    """An item's key in the cache of abstention scores (a question may be an item of two kinds)."""
    return f"{it['split']}|{it['kind']}|{it['question']}"


def is_abstention(answer: str, text: str) -> bool:
    return " ".join(answer.lower().replace(".", " ").split()) == text


def kept_at(right_scores: list[float], still: list[bool], unanswerable: list[float], keep: float = 0.95):
    """The share of ``unanswerable`` abstained on (score below the threshold) at the largest threshold that
    keeps ``keep`` of all the right answers (still right and scored at or above it); None if fewer than that are
    still right."""
    need = math.ceil(keep * len(right_scores))
    ok = sorted((s for s, good in zip(right_scores, still) if good), reverse=True)
    if need == 0 or len(ok) < need:
        return None
    return round(share([u < ok[need - 1] for u in unanswerable]), 3)


def ask_cached(rag, todo: list[tuple[str, str | None]], work: Path, key: str, k: int, batch_size: int = 8) -> dict:
    """(question, book name or None) -> the candidate's answer, asked of the demo book or of
    ``work/book-without-NAME``; appended to ``work/generator-answers-KEY.jsonl`` as asked."""
    from openbook.index.kb.api import KnowledgeBase

    cache = work / f"generator-answers-{key}.jsonl"
    done = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            done[(r["question"], r["book"])] = r["answer"]
    full = rag.kb
    start, asked = time.perf_counter(), 0
    with open(cache, "a", encoding="utf-8") as fh:
        for book in dict.fromkeys(b for _, b in todo):
            questions = list(dict.fromkeys(q for q, b in todo if b == book and (q, b) not in done))
            if not questions:
                continue
            rag.use_knowledge_base(full if book is None else KnowledgeBase.load(work / f"book-without-{book}"))
            try:
                for i in range(0, len(questions), batch_size):
                    for q, answer in zip(questions[i: i + batch_size], rag.ask(questions[i: i + batch_size], k=k)):
                        done[(q, book)] = answer.answer
                        fh.write(json.dumps({"question": q, "book": book, "answer": answer.answer},
                                            ensure_ascii=False) + "\n")
                    fh.flush()
                    asked += len(questions[i: i + batch_size])
                    print(f"  candidate asked {asked} ({time.perf_counter() - start:.0f} s)", flush=True)
            finally:
                rag.use_knowledge_base(full)
    return done


def main(argv=None) -> None:
    p = set_arguments(__doc__.splitlines()[0])
    p.add_argument("--run", default=str(REPO / "runs" / "default-abstain-init"), help="the candidate's training run")
    p.add_argument("--abstain-text", default=ABSTAIN_TEXT, help="the answer it was taught for no answer")
    p.add_argument("--sample", type=int, default=100, help="unanswerable questions asked, per kind and split")
    p.add_argument("--limit", type=int, default=None, help="score only every n-th item (a quick check)")
    args = p.parse_args(argv)
    shipped, work, items = shipped_items(args)
    items = items[:: args.limit or 1]
    from openbook.rag import RAG

    data_dir = Path(args.data_dir)
    nq_rows, other = load_sets(data_dir)
    fresh = load_fresh(data_dir, len(nq_split(data_dir)[0]))
    today = {q: g["answer"] for q, g in answer_all(shipped, nq_rows, work / "answers.jsonl", args.k, 8,
                                                    cached_only=True).items()}
    del shipped
    cand = RAG.load(run=args.run)
    checkpoint = Path(args.run) / "checkpoint" / "model.safetensors"
    key = hashlib.sha256(checkpoint.read_bytes() + str(cand.generator.model.dtype).encode()).hexdigest()[:16]
    print(f"candidate: {args.run} ({checkpoint.name}, {key}), abstain text {args.abstain_text!r}, score scale "
          f"{float(cand.score_scale):.2f}", flush=True)

    cache = work / f"generator-abstain-{key}-{hashlib.sha256(args.abstain_text.encode()).hexdigest()[:8]}.json"
    scored = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
    todo = [it for it in items if item_key(it) not in scored]
    if todo:
        started = time.perf_counter()
        for it, value in zip(todo, abstain_logprob(cand, todo, args.abstain_text)):
            scored[item_key(it)] = float(value)
        print(f"abstention scores: {time.perf_counter() - started:.0f} s", flush=True)
        cache.with_suffix(".tmp").write_text(json.dumps(scored), encoding="utf-8")
        cache.with_suffix(".tmp").replace(cache)

    rng = random.Random(args.seed)
    sample = []
    for split in ("dev", "test"):
        for kind in ("absent", "deleted"):
            group = [it for it in items if it["split"] == split and it["kind"] == kind]
            sample += rng.sample(group, min(args.sample, len(group)))
    todo = ([(r["question"], None) for r in nq_rows] + [(it["question"], None) for it in items if it["kind"] == "right"]
            + [(it["question"], it.get("book")) for it in sample])
    answers = ask_cached(cand, todo, work, key, args.k)

    figures: dict = {"run": args.run, "abstain_text": args.abstain_text,
                     "score_scale": round(float(cand.score_scale), 3)}
    nq_before = [right(r, today[r["question"]]) for r in nq_rows if r["question"] in today]
    nq_after = [right(r, answers[(r["question"], None)]) for r in nq_rows if r["question"] in today]
    nq_abstained = [is_abstention(answers[(r["question"], None)], args.abstain_text) for r in nq_rows
                    if r["question"] in today]
    figures["nq_fifth"] = {"asked": len(nq_after), "em_shipped": round(share(nq_before), 3),
                           "em_candidate": round(share(nq_after), 3), "greedy_abstained": round(share(nq_abstained), 3)}
    print(f"NQ fifth ({len(nq_after)}): exact match {share(nq_before):.1%} shipped, {share(nq_after):.1%} candidate; "
          f"the candidate answers {args.abstain_text!r} to {share(nq_abstained):.1%}")
    goldens = {r["question"]: r for r in nq_rows + other + fresh}
    for it in items:
        it["f"] = {**it["f"], "generator": -scored[item_key(it)]}
        if it["kind"] == "right":
            got = answers[(it["question"], None)]
            it["still"] = right(goldens[it["question"]], got) and not is_abstention(got, args.abstain_text)
    for split in ("dev", "test"):
        still = [it["still"] for it in items if it["split"] == split and it["kind"] == "right"]
        greedy = {kind: share([is_abstention(answers[(it["question"], it.get("book"))], args.abstain_text)
                               for it in sample if it["split"] == split and it["kind"] == kind])
                  for kind in ("absent", "deleted")}
        figures[split] = {"right_today": len(still), "still_right": round(share(still), 3),
                          "greedy_abstained": {k: round(v, 3) for k, v in greedy.items()}}
        print(f"{split}: the candidate still answers {share(still):.1%} of the {len(still)} right today; its greedy "
              f"answer is {args.abstain_text!r} for {greedy['absent']:.1%} (absent) and {greedy['deleted']:.1%} "
              f"(deleted) of {args.sample} unanswerable asked of each kind")
    figures.update(scored_figures(items, args))
    print(json.dumps(figures))


def scored_figures(items: list[dict], args) -> dict:
    """The abstention score alone and beside the shipped six, with the candidate's answers and, the candidate
    then only judging, with the shipped default's: AUCs, the test's abstention at 95% of its right answers kept,
    and the cross-validated development figures (module docs)."""
    SIGNALS.update({"shipped": SHIPPED, "generator": ("generator",), "shipped + generator": SHIPPED + ("generator",)})
    dev_a = [it for it in items if it["split"] == "dev" and it["kind"] == "right"]
    dev_u = [it for it in items if it["split"] == "dev" and it["kind"] != "right"]
    test_a = [it for it in items if it["split"] == "test" and it["kind"] == "right"]
    test_u = {kind: [it["f"] for it in items if it["split"] == "test" and it["kind"] == kind]
              for kind in ("absent", "deleted")}
    # (row, signal, whose answers): with the shipped default's answers every right answer today is still right,
    # and the candidate's score only decides whether to give it
    variants = [("shipped", "shipped", "shipped"), ("generator", "generator", "candidate"),
                ("shipped + generator", "shipped + generator", "candidate"),
                ("generator judging", "generator", "shipped"),
                ("shipped + generator judging", "shipped + generator", "shipped")]
    out = {}
    for label, name, answers in variants:
        own = answers == "shipped"
        fit_a = dev_a if own else [it for it in dev_a if it["still"]]
        kept_rates, rates = cross_validate(name, [it["f"] for it in fit_a], [it["f"] for it in dev_u], args.keep,
                                           args.rounds, args.seed,
                                           ([it["question"] for it in fit_a], [it["question"] for it in dev_u]))
        score, weights = signal_of(name, [it["f"] for it in fit_a], [it["f"] for it in dev_u])
        still = [True if own else it["still"] for it in test_a]
        right_scores = [score(it["f"]) for it in test_a]
        out[label] = {
            "answers": answers, "weights": weights,
            "cv_answered_right": round(share(kept_rates) * len(fit_a) / len(dev_a), 3),
            "cv_abstain": by_kind(rates, [it["kind"] for it in dev_u]),
            "dev_auc": round(auc([score(it["f"]) for it in fit_a], [score(it["f"]) for it in dev_u]), 4),
            "test_auc": {kind: round(auc([s for s, ok in zip(right_scores, still) if ok], [score(f) for f in rows]), 4)
                         for kind, rows in test_u.items()},
            "test_at_95": {kind: kept_at(right_scores, still, [score(f) for f in rows])
                           for kind, rows in test_u.items()}}
        f = out[label]
        f["worth_shipping"] = (label != "shipped" and f["cv_answered_right"] >= 0.95
                               and f["cv_abstain"]["all"] > out["shipped"]["cv_abstain"]["all"])
        at = {kind: "unreachable" if v is None else f"{v:.1%}" for kind, v in f["test_at_95"].items()}
        print(f"  {label:28s} cross-validated: answers {f['cv_answered_right']:.1%} of the right today, abstains on "
              f"{f['cv_abstain']['all']:.1%} (absent {f['cv_abstain']['absent']:.1%}, deleted "
              f"{f['cv_abstain']['deleted']:.1%}); development AUC {f['dev_auc']:.3f}; test AUC "
              f"{f['test_auc']['absent']:.3f} / {f['test_auc']['deleted']:.3f}; test at 95% of the right answers "
              f"kept abstains on {at['absent']} / {at['deleted']}"
              + ("  <- worth shipping by the rule" if f["worth_shipping"] else ""))
    return {"signals": out}


if __name__ == "__main__":
    main()
