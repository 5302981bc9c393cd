"""Candidate abstention signals beyond the shipped features, scored as bench/abstention.py scores its own.

Does anything else the retriever or the generator knows rank bench/abstention.py's questions better than the
shipped signal?

The shipped signal (``combined`` of ``bench/abstention.py``) weighs features of one answer and its k passages: the
baseline here, run 9's six in runs 11-13 and the eight since run 14. This bench adds four groups of candidates and
scores each with the same protocol, on the same sets and cached answers (run ``bench/abstention.py`` first; nothing
is asked again here, and the generator's reading of the answers below is kept in the same folder):

* **passages**: more of what the k passages already carry, free at ask time: the gap between the first and second
  retrieval scores, the entropy of p(z|x), the judge's soft maximum (log-sum-exp) and its logit of the top passage,
  how many passages contain the answer, whether a title does, and the share of the answer's words the question
  already has (a wrong answer often repeats the question);
* **top 100**: the retrieval scores of the top 100 on the question's own book (query-performance predictors: their
  spread, the first score's lead over the hundredth and its z-score among them);
* **closed book**: the generator's log-likelihood of the answer per token under the top passage and under an empty
  one (what it would say without the book), and their difference (how much the passage raised the answer);
* **probe**: a linear probe of the generator's hidden state at the answer's last token (layer ``--layer``, the top
  passage read): a ridge direction fitted on the development set, its logit out of fold (five folds by question)
  there and fitted on the whole development set for the test set.

Each candidate is the shipped features plus one group, and all groups together. Scored as ``bench/abstention.py`` scores
its candidates: 20 seeded two-fold splits of the development set by question (weights = a class-balanced logistic
regression's direction, threshold keeping ``--keep`` of the fitting half's right answers), then, fitted on the whole
development set, the AUC and the abstention at 95% of right answers answered on the fresh test set (thresholds set
on the test set itself: what any threshold could reach), and the test's figures at the threshold keeping ``--keep``
of the development set's right answers (what a calibration reaches). The rule for a
candidate to be worth shipping was fixed before the first run: cross-validated, it keeps at least 95% of the right
answers and abstains on more of the unanswerable than the shipped signal does.

Usage:  OMP_NUM_THREADS=2 PYTHONPATH=. python bench/abstention_signals.py [--data-dir ../shared/data] [--work DIR]
        [--layer 22] [--limit N]

It prints the CPU and ends with one JSON line of its figures.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from _abstention_sets import answer_all, ask_without, has_answer, judge_all, load_fresh, load_sets, retrieve_all, right  # noqa: E402
from _common import nq_split, print_header, quiet  # noqa: E402
from abstention import (  # noqa: E402
    SIGNALS,
    auc,
    by_kind,
    cross_validate,
    curve_points,
    folds,
    set_arguments,
    share,
    signal_of,
    threshold_keeping,
)

SHIPPED = SIGNALS["combined"]
GROUPS = {"passages": ("gap", "entropy", "judge_lse", "judge_top", "holding", "in_title", "in_question"),
          "top 100": ("spread", "lead", "z_score"),
          "closed book": ("lp_top", "lp_empty", "lift"),
          "probe": ("probe",)}


def passage_features(question: str, answer: str, passages: list[tuple]) -> dict[str, float]:
    """The ``passages`` group of one answer and its ``(score, p(z|x), title, text, judge logit)`` passages."""
    from openbook.rag.abstain import _contains, words

    scores = sorted((p[0] for p in passages), reverse=True)
    probs = np.array([p[1] for p in passages], dtype=np.float64)
    logits = np.array([p[4] for p in passages], dtype=np.float64)
    said, asked = words(answer), set(words(question))
    holds = [_contains(words(p[3]), said) for p in passages]
    return {"gap": scores[0] - scores[1] if len(scores) > 1 else 0.0,
            "entropy": float(-(probs * np.log(np.clip(probs, 1e-12, None))).sum()),
            "judge_lse": float(np.logaddexp.reduce(logits)),
            "judge_top": float(logits[int(np.argmax([p[0] for p in passages]))]),
            "holding": float(sum(holds)), "in_title": float(any(_contains(words(p[2]), said) for p in passages)),
            "in_question": sum(w in asked for w in said) / len(said) if said else 0.0}


def top100_features(scores: list[float]) -> dict[str, float]:
    """The ``top 100`` group from a question's top retrieval scores, best first."""
    s = np.asarray(scores, dtype=np.float64)
    return {"spread": float(s.std()), "lead": float(s[0] - s[-1]),
            "z_score": float((s[0] - s.mean()) / (s.std() + 1e-9))}


def ridge_direction(x: np.ndarray, y: np.ndarray, strength: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A class-balanced ridge regression of ``y`` (1 answerable, 0 not) on standardised ``x``: ``(w, mean, std)``,
    the probe's logit being ``((x - mean) / std) @ w``. The penalty is ``strength`` times the number of rows."""
    mean, std = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / std
    weight = np.where(y == 1, 0.5 / max(1, y.sum()), 0.5 / max(1, (1 - y).sum())) * len(y)
    target = y - np.average(y, weights=weight)
    zw = z * weight[:, None]
    w = np.linalg.solve(z.T @ zw + strength * len(y) * np.eye(z.shape[1]), zw.T @ target)
    return w, mean, std


def probe_logits(hidden: np.ndarray, y: np.ndarray, dev: np.ndarray, keys: list, seed: int = 0,
                 n_folds: int = 5) -> np.ndarray:
    """The probe's logit of every row: out of fold (``n_folds`` by ``keys``) for the development rows ``dev``, and
    from the probe fitted on all of them for the rest."""
    out = np.zeros(len(hidden))
    dev_rows = np.flatnonzero(dev)
    fold_of = folds([keys[i] for i in dev_rows], seed, n_folds)
    folds_ = np.array([fold_of[keys[i]] for i in dev_rows])
    for f in range(n_folds):
        fit, held = dev_rows[folds_ != f], dev_rows[folds_ == f]
        w, mean, std = ridge_direction(hidden[fit], y[fit])
        out[held] = ((hidden[held] - mean) / std) @ w
    rest = np.flatnonzero(~dev)
    if len(rest):
        w, mean, std = ridge_direction(hidden[dev_rows], y[dev_rows])
        out[rest] = ((hidden[rest] - mean) / std) @ w
    return out


def generator_pass(rag, items: list[dict], layer: int, batch_size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """For each item: log p(answer + EOS | question, passage) per token under its top passage and under an empty
    one ``(N, 2)``, and the hidden state of layer ``layer`` at the answer's last token under the top passage."""
    import torch

    from openbook.corpus.passages import Passage

    gen = rag.generator
    lps = np.zeros((len(items), 2))
    hidden = None
    start = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(items), batch_size):
            batch = items[s: s + batch_size]
            tops = [max(it["passages"], key=lambda p: p[0]) for it in batch]
            empty = [[Passage(id="", title="", text="")]] * len(batch)
            passages = [[Passage(id="", title=t[2], text=t[3])] for t in tops] + empty
            contexts = gen.contexts([it["question"] for it in batch] * 2, passages)
            targets, mask = gen.encode_targets([it["answer"] for it in batch] * 2)
            rows = []
            for i in range(len(passages)):
                prompt = contexts.input_ids[i][contexts.attention_mask[i].bool()].tolist()
                answer = targets[i][mask[i]].tolist()
                rows.append((prompt, answer))
            width = max(len(p) + len(a) for p, a in rows)
            ids = torch.full((len(rows), width), gen.pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (p, a) in enumerate(rows):
                ids[i, width - len(p) - len(a):] = torch.tensor(p + a)
                attention[i, width - len(p) - len(a):] = 1
            out = gen.model(input_ids=ids.to(gen.device), attention_mask=attention.to(gen.device),
                            position_ids=(attention.cumsum(-1) - 1).clamp(min=0).to(gen.device),
                            output_hidden_states=True, return_dict=True)
            logprobs = torch.log_softmax(out.logits.float(), dim=-1)
            states = out.hidden_states[layer].float()
            if hidden is None:
                hidden = np.zeros((len(items), states.shape[-1]), dtype=np.float32)
            for i, (_, a) in enumerate(rows):
                n = len(a)  # the answer's tokens and EOS, the last n of the row, each predicted by the one before
                got = logprobs[i, width - n - 1: width - 1].gather(-1, torch.tensor(a, device=logprobs.device)[:, None])
                lps[s + i % len(batch), i // len(batch)] = float(got.sum()) / n
                if i < len(batch):
                    hidden[s + i] = states[i, width - 2].cpu().numpy()  # the answer's last token, predicting EOS
            if (s // batch_size) % 50 == 0:
                print(f"  generator read {s + len(batch)}/{len(items)} ({time.perf_counter() - start:.0f} s)",
                      flush=True)
    return lps, hidden


def cached_generator_pass(rag, items: list[dict], layer: int, work: Path) -> tuple[np.ndarray, np.ndarray]:
    """:func:`generator_pass`, kept in ``work`` (a NumPy archive, read without pickle) under a hash of the items'
    questions, answers and top passages, the layer and the generator's dtype: a second run only calibrates."""
    import hashlib

    read = [(it["question"], it["answer"], max(it["passages"], key=lambda p: p[0])[2:4]) for it in items]
    key = hashlib.sha256(json.dumps([read, layer, str(rag.generator.model.dtype)]).encode()).hexdigest()[:16]
    cache = work / f"signals-generator-{key}.npz"
    if cache.exists():
        with np.load(cache, allow_pickle=False) as saved:
            print(f"generator pass: read from {cache}", flush=True)
            return saved["lps"], saved["hidden"]
    started = time.perf_counter()
    lps, hidden = generator_pass(rag, items, layer)
    print(f"generator pass: {time.perf_counter() - started:.0f} s", flush=True)
    tmp = cache.with_name(cache.stem + ".tmp.npz")
    np.savez(tmp, lps=lps, hidden=hidden)
    tmp.replace(cache)
    return lps, hidden


def top_scores(rag, questions: list[str], n: int = 100) -> dict[str, list[float]]:
    """question -> its top ``n`` retrieval scores on ``rag``'s book, best first."""
    out = {}
    for start in range(0, len(questions), 64):
        batch = questions[start: start + 64]
        for question, scores in zip(batch, rag.retrieve(batch, n).scores.tolist()):
            out[question] = scores
    return out


def collect(rag, data_dir: Path, work: Path, k: int, max_passages: int, top100: bool = True) -> list[dict]:
    """bench/abstention.py's scored items, from its caches: each ``{question, answer, logprob, passages, split
    ("dev"/"test"), kind ("right"/"absent"/"deleted"), top100, f}``, a deleted-answer item's passages and top 100
    from its own book, which ``book`` names, and ``f`` its :func:`openbook.rag.abstain.abstain_features`. Without
    ``top100`` the top 100 scores are not retrieved (None)."""
    nq, other = load_sets(data_dir)
    fresh = load_fresh(data_dir, len(nq_split(data_dir)[0]))
    passages = retrieve_all(rag, nq + other + fresh, k)
    in_top_k = {r["question"]: has_answer(r, passages[r["question"]]) for r in other + fresh}
    in_top_k.update({r["question"]: True for r in nq})  # the demo book holds every NQ question's gold passage
    got = answer_all(rag, nq + other + fresh, work / "answers.jsonl", k, 8, cached_only=True)
    if not got:
        raise SystemExit(f"no cached answers in {work}: run bench/abstention.py first")
    passages = judge_all(rag, passages, {q: g["answer"] for q, g in got.items()}, work / "judged.json")
    items = []
    for split, rows in (("dev", nq + other), ("test", fresh)):
        for r in rows:
            g = got.get(r["question"])
            kind = "absent" if not in_top_k[r["question"]] else "right" if g and right(r, g["answer"]) else None
            if g and kind:
                items.append({"question": r["question"], "answer": g["answer"], "logprob": g["logprob"],
                              "passages": passages[r["question"]], "split": split, "kind": kind})
    plain = top_scores(rag, [it["question"] for it in items]) if top100 else {}
    for it in items:
        it["top100"] = plain.get(it["question"])
    full = rag.kb
    for name, rows, split in (("nq", nq, "dev"), ("dev", [r for r in other if in_top_k[r["question"]]], "dev"),
                              ("test", [r for r in fresh if in_top_k[r["question"]]], "test")):
        asked = ask_without(rag, rows, name, work, k, 8, max_passages, cached_only=True)
        found = [r["question"] for r in asked["kept"] if r["question"] in asked["answers"]
                 and r["question"] not in asked["leaked"]]
        scores = {}
        if top100:
            rag.use_knowledge_base(asked["book"])
            try:
                scores = top_scores(rag, found)
            finally:
                rag.use_knowledge_base(full)
        for q in found:
            g = asked["answers"][q]
            items.append({"question": q, "answer": g["answer"], "logprob": g["logprob"],
                          "passages": asked["passages"][q], "split": split, "kind": "deleted", "top100": scores.get(q),
                          "book": name})
    from openbook.rag.abstain import abstain_features

    for it in items:
        it["f"] = abstain_features(it["question"], it["answer"], it["passages"], it["logprob"])
    return items


def shipped_items(args, top100: bool = False) -> tuple:
    """(the shipped default as `openbook ask` loads it, the cache folder, :func:`collect`'s items from it), after
    the bench's header: what the benches built on bench/abstention.py's caches start with."""
    print_header()
    quiet()
    from openbook.models.loading import cache_dir
    from openbook.rag import RAG

    work = Path(args.work) if args.work else cache_dir() / "bench" / "abstention"
    rag = RAG.load()  # the shipped default, whose cached answers define "right today"
    return rag, work, collect(rag, Path(args.data_dir), work, args.k, args.max_passages, top100=top100)


def evaluate(items: list[dict], names: list[str], keep: float, rounds: int, seed: int) -> dict:
    """Each candidate of ``names`` (in ``abstention.SIGNALS``): its cross-validated figures on the development
    items and, fitted on all of them, its test AUC, its abstention at 95% answered (module docs) and, at the threshold
    keeping ``keep`` of the development right answers (as bench/abstention.py calibrates), the test's right answers
    answered and unanswerable abstained on."""
    dev_a = [it for it in items if it["split"] == "dev" and it["kind"] == "right"]
    dev_u = [it for it in items if it["split"] == "dev" and it["kind"] != "right"]
    test_a = [it["f"] for it in items if it["split"] == "test" and it["kind"] == "right"]
    test_u = {kind: [it["f"] for it in items if it["split"] == "test" and it["kind"] == kind]
              for kind in ("absent", "deleted")}
    keys = ([it["question"] for it in dev_a], [it["question"] for it in dev_u])
    kinds = [it["kind"] for it in dev_u]
    a, u = [it["f"] for it in dev_a], [it["f"] for it in dev_u]
    out = {}
    for name in names:
        kept_rates, rates = cross_validate(name, a, u, keep, rounds, seed, keys)
        score, _ = signal_of(name, a, u)
        t = threshold_keeping([score(f) for f in a], keep)
        out[name] = {"answered_right": round(share(kept_rates), 3), "abstain": by_kind(rates, kinds),
                     "dev_auc": round(auc([score(f) for f in a], [score(f) for f in u]), 4),
                     "test_auc": {kind: round(auc([score(f) for f in test_a], [score(f) for f in rows]), 4)
                                  for kind, rows in test_u.items()},
                     "test_at_95": {kind: curve_points([score(f) for f in test_a], [score(f) for f in rows])
                                    .get("abstain_unanswerable_at_95_answered") for kind, rows in test_u.items()},
                     "test_calibrated": {"answered": round(share([score(f) >= t for f in test_a]), 3),
                                         **{kind: round(share([score(f) < t for f in rows]), 3)
                                            for kind, rows in test_u.items()}}}
    return out


def lowest_right(items: list[dict], n: int) -> None:
    """Print the ``n`` development right answers that the shipped signal (fitted on the development set) scores
    lowest, each with the best-scored passage that holds it (the top passage if none does): what the threshold must
    keep to answer 95% of them."""
    from openbook.rag.abstain import _contains, words

    a = [it for it in items if it["split"] == "dev" and it["kind"] == "right"]
    score, _ = signal_of("shipped", [it["f"] for it in a],
                         [it["f"] for it in items if it["split"] == "dev" and it["kind"] != "right"])
    print(f"\nthe {n} development right answers the shipped signal scores lowest, with the best-scored passage "
          "holding the answer (the top passage if none does):")
    for it in sorted(a, key=lambda it: score(it["f"]))[:n]:
        holding = [p for p in it["passages"] if _contains(words(p[3]), words(it["answer"]))] or it["passages"]
        top = max(holding, key=lambda p: p[0])
        print(f"  {score(it['f']):6.2f}  {it['question']!r} -> {it['answer']!r}  [{top[2]}] {top[3][:110]!r}")


def main(argv=None) -> None:
    p = set_arguments(__doc__.splitlines()[0])
    p.add_argument("--layer", type=int, default=22, help="the generator layer the probe reads")
    p.add_argument("--limit", type=int, default=None, help="score only every n-th item (a quick check)")
    p.add_argument("--lowest", type=int, default=15,
                   help="list this many right answers the shipped signal scores lowest")
    p.add_argument("--labels", default=None, metavar="FILE",
                   help="provenance labels (bench/abstention_provenance.py): leave out the unsupported right answers")
    args = p.parse_args(argv)
    rag, work, items = shipped_items(args, top100=True)
    items = items[:: args.limit or 1]
    counts = {f"{s}:{k}": sum(it["split"] == s and it["kind"] == k for it in items)
              for s in ("dev", "test") for k in ("right", "absent", "deleted")}
    print(f"items from bench/abstention.py's caches: {counts}", flush=True)
    lps, hidden = cached_generator_pass(rag, items, args.layer, work)
    if args.labels:  # after the cached pass, whose key is every item
        from _abstention_sets import read_labels, supported_only

        kept = {id(it) for it in supported_only(items, read_labels(Path(args.labels)))}
        rows = [i for i, it in enumerate(items) if id(it) in kept]
        items, lps, hidden = [items[i] for i in rows], lps[rows], hidden[rows]
    y = np.array([it["kind"] == "right" for it in items], dtype=np.float64)
    dev = np.array([it["split"] == "dev" for it in items])
    probe = probe_logits(hidden, y, dev, [it["question"] for it in items], args.seed)
    for it, (top, empty), logit in zip(items, lps, probe):
        it["f"] = {**it["f"], **passage_features(it["question"], it["answer"], it["passages"]),
                   **top100_features(it["top100"]), "lp_top": top, "lp_empty": empty, "lift": top - empty,
                   "probe": float(logit)}
    names = {"shipped": SHIPPED, **{f"+ {g}": SHIPPED + f for g, f in GROUPS.items()},
             "+ all": SHIPPED + tuple(f for group in GROUPS.values() for f in group)}
    SIGNALS.update(names)  # the candidates, scored by bench/abstention.py's functions
    figures = evaluate(items, list(names), args.keep, args.rounds, args.seed)
    shipped = figures["shipped"]
    print(f"\n{args.rounds} two-fold splits of the development set by question (threshold keeping {args.keep:.0%} "
          "of the fitting half's right answers); AUC in sample; test fitted on all of the development set:")
    for name, f in figures.items():
        f["worth_shipping"] = (f["answered_right"] >= 0.95 and f["abstain"]["all"] > shipped["abstain"]["all"]
                               and name != "shipped")
        print(f"  {name:14s} keeps {f['answered_right']:.1%}, abstains on {f['abstain']['all']:.1%} (absent "
              f"{f['abstain']['absent']:.1%}, deleted {f['abstain']['deleted']:.1%}); development AUC "
              f"{f['dev_auc']:.3f}; test AUC {f['test_auc']['absent']:.3f} / {f['test_auc']['deleted']:.3f}, at 95% "
              f"answered abstains on {f['test_at_95']['absent']:.1%} / {f['test_at_95']['deleted']:.1%}; calibrated, "
              f"answers {f['test_calibrated']['answered']:.1%} and abstains on {f['test_calibrated']['absent']:.1%} / "
              f"{f['test_calibrated']['deleted']:.1%}" + ("  <- worth shipping by the rule" if f["worth_shipping"] else ""))
    lowest_right(items, args.lowest)
    print(json.dumps({"items": counts, "layer": args.layer, "keep_target": args.keep, "candidates": figures}))


if __name__ == "__main__":
    main()
