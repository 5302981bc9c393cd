"""Train the shipped default's passage judge (openbook.models.judge): does this passage hold the question's answer?

The questions are the ones the shipped default trained on (``scripts/split_qa_data.py``: NQ-open's training four
fifths and, of WebQuestions' and CuratedTrec's training parts, the first half as many each), never a held-out fifth
and never the rest of those training parts, which ``bench/abstention.py`` keeps as its fresh test set. Each question's top 5
passages of the demo knowledge base, retrieved by the shipped default, make five pairs labelled by DPR's
``has_answer`` (CuratedTrec's answers are regexes). NQ's gold passages are in the demo book and the other two
sets' answers mostly are not, so each set's pairs are weighted to balance its own yes and no: the judge must tell
a passage that holds the answer from one that does not within each set, not NQ's style of question from theirs.

With ``--reads-answer`` the judge reads an answer too ("question answer: A [SEP] title. text") and scores
whether the passage gives that answer to the question: the same questions and passages, each passage once with a
wrong answer (a span of its own text shaped like a gold answer, or one that repeats the question's words, as a
generator that guesses copies; or, for a passage without the answer, a gold answer it does not hold) and, when it
holds a gold answer, once more with that answer. The gold labels no longer say "this WebQuestions passage holds
no answer" where it says the answer in other words than the Freebase name; a wrong span is wrong either way.
Such a judge pools the question and answer's tokens only (``--pooling first``: the answer's few tokens decide the
label, and a mean over the whole passage drowned them, so that the first such judge, pooled over every token, learnt
a constant), and its pairs are not weighted per set (``--no-balance``): each passage already gives one wrong answer
and, when it holds one, a right one.

With ``--own-answers`` (and ``--reads-answer``) the pairs also hold the shipped default's own answers to the same
questions (:func:`own_answers`): WebQuestions' and CuratedTrec's asked of the demo book, NQ's of copies without the
passages holding their answers, each answer paired with the passages that hold it and the top one, yes only where it
is right and the passage holds it. These are the errors the judge must catch as the generator makes them; the
answers are cached in ``--work``, so a killed run resumes.

The judge is the packaged MiniLM with rank-16 LoRA adapters on its attention and feed-forward layers and a linear
head, trained with AdamW (by default learning rate 1e-3, 50 warm-up steps, then linear decay, 2 epochs of 16 pairs)
in bfloat16 autocast, and written to ``--out`` (default ``openbook/data/default/judge.safetensors``, with
``judge.json``). The shipped judge (session 18) is the one that reads the answer, trained by the second command
below. The pairs are cached in ``--work``.

Usage:  OMP_NUM_THREADS=2 PYTHONPATH=. python scripts/train_judge.py [--data-dir ../shared/data] [--work DIR]
        [--out FILE] [--reads-answer] [--pooling mean|first] [--no-balance] [--own-answers] [--lr 1e-3]
        [--epochs 2] [--limit N]
        the shipped judge: ... scripts/train_judge.py --reads-answer --no-balance --lr 3e-4 --epochs 1

Ends with one JSON line (pairs, steps, last loss, seconds).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _abstention_sets import other_parts, retrieve_all  # noqa: E402
from _common import nq_split, print_header, quiet  # noqa: E402

from openbook.models.judge import POOLINGS  # noqa: E402

LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["query", "key", "value", "dense"]}


def training_rows(data_dir: Path) -> list[dict]:
    """The shipped default's training questions, as ``{question, answers, mode, source}``."""
    nq_train = nq_split(data_dir)[0]
    used = len(nq_train) // 2
    (wq, _), (ct, _) = other_parts(data_dir)
    return ([{"question": r["question"], "answers": r["answers"], "mode": "dpr", "source": "nq"} for r in nq_train]
            + [dict(r, source="wq") for r in wq[:used]] + [dict(r, source="ct") for r in ct[:used]])


def make_pairs(rows: list[dict], k: int) -> list[dict]:
    """Each question's top ``k`` passages (the shipped default's retrieval over the demo book), labelled."""
    from openbook.eval.retrieval import answer_in_passage
    from openbook.rag import RAG

    passages = retrieve_all(RAG.load(), rows, k)
    return [{"question": r["question"], "title": title, "text": text, "source": r["source"],
             "y": int(answer_in_passage(text, r["answers"], r["mode"]))}
            for r in rows for _, _, title, text in passages[r["question"]]]


_TOKEN = re.compile(r"[\w'’.,%$-]+")


def _tokens(text: str) -> list[str]:
    """The words of ``text`` as written (case, digits and inner punctuation kept), trailing stops and commas cut."""
    return [t for t in (t.strip(".,") for t in _TOKEN.findall(text)) if t]


def _shape(answer: str) -> tuple[int, bool, bool]:
    """(words, starts with a capital, has a digit) of an answer: what a wrong span should look like."""
    return (min(5, max(1, len(answer.split()))), answer[:1].isupper(), any(c.isdigit() for c in answer))


def wrong_span(text: str, shape: tuple[int, bool, bool], avoid, rng: random.Random) -> str | None:
    """A span of ``text`` of ``shape``'s length, starting with a capital or holding a digit as it says, ending in
    no stop word, for which ``avoid(span)`` is false; None if there is none."""
    from bm25s.stopwords import STOPWORDS_EN_PLUS  # the stop words abstention's features use

    stop = frozenset(STOPWORDS_EN_PLUS)
    tokens = _tokens(text)
    n, capital, digit = shape

    def fits(window: list[str]) -> bool:
        if window[0].lower() in stop or window[-1].lower() in stop:
            return False
        if capital and not all(t[:1].isupper() or (0 < j < n - 1 and t in stop) for j, t in enumerate(window)):
            return False
        return not digit or any(c.isdigit() for t in window for c in t)

    spans = [" ".join(tokens[i: i + n]) for i in range(len(tokens) - n + 1) if fits(tokens[i: i + n])]
    rng.shuffle(spans)
    return next((span for span in spans if not avoid(span)), None)


def echo_span(question: str, title: str, text: str, avoid, rng: random.Random) -> str | None:
    """A wrong answer that repeats what the question asks about: the passage's title if it shares a content word
    with the question, else a span of one to three words of the passage around such a word; None if none."""
    from openbook.rag.abstain import content_words, words

    asked = set(content_words(question))
    if title and asked & set(words(title)) and not avoid(title):
        return title
    tokens = _tokens(text)
    spans = [" ".join(tokens[i: i + n]) for n in (1, 2, 3) for i in range(len(tokens) - n + 1)
             if asked & set(words(tokens[i]))]
    rng.shuffle(spans)
    return next((span for span in spans if not avoid(span)), None)


def gold_in(text: str, row: dict) -> str | None:
    """The first gold answer ``text`` holds, as it reads there for a regex (CuratedTrec); None if none."""
    from openbook.eval.retrieval import answer_in_passage

    if row["mode"] == "regex":
        for pattern in row["answers"]:
            try:
                found = re.search(pattern, text, re.IGNORECASE)
            except re.error:
                continue
            if found and found.group(0).strip():
                return found.group(0).strip()
        return None
    return next((a for a in row["answers"] if answer_in_passage(text, [a])), None)


def answer_pairs(pairs: list[dict], rows: list[dict], seed: int) -> list[dict]:
    """The passage pairs (:func:`make_pairs`) with an answer each for a judge that reads it (module docs)."""
    from openbook.eval.retrieval import answer_in_passage

    by_question = {r["question"]: r for r in rows}
    rng, out = random.Random(seed), []
    for pair in pairs:
        row = by_question[pair["question"]]

        def avoid(span, row=row):
            return answer_in_passage(span, row["answers"], row["mode"])

        gold = gold_in(pair["text"], row) if pair["y"] else None
        like = gold or next((a for a in row["answers"] if row["mode"] == "dpr"), "Some Name")
        roll = rng.random()
        if gold is None and roll < 0.25 and row["mode"] == "dpr":
            wrong = row["answers"][0]  # a gold answer the passage does not hold: not this passage's answer
        elif roll < 0.6:
            wrong = wrong_span(pair["text"], _shape(like), avoid, rng)
        else:
            wrong = echo_span(pair["question"], pair["title"], pair["text"], avoid, rng)
        wrong = wrong or wrong_span(pair["text"], (1, False, False), avoid, rng)
        if wrong:
            out.append(dict(pair, answer=wrong, y=0))
        if gold:
            out.append(dict(pair, answer=gold, y=1))
    return out


def own_answers(rows: list[dict], work: Path, k: int, batch_size: int, group: int = 324,
                max_passages: int = 50) -> list[dict]:
    """The shipped default's own answers to ``rows``, as ``{row, answer, passages}`` (its top ``k`` as
    ``(score, p, title, text)``): WebQuestions' and CuratedTrec's asked of the demo book, which mostly lacks their
    answers (the absent kind of ``bench/abstention.py``), and NQ's asked, ``group`` at a time, of a copy of the book
    without the passages holding their answers (its deleted-answer kind; questions whose answers are in more than
    ``max_passages`` passages left out, as the bench leaves them out). Answers are cached in ``work`` as the bench
    caches its own, so a killed run resumes."""
    from _abstention_sets import answer_all, book_without, holding_rows

    from openbook.rag import RAG

    rag = RAG.load()
    full = rag.kb
    other = [r for r in rows if r["source"] != "nq"]
    asked = [(other, full, work / "own-answers.jsonl")]
    nq = [r for r in rows if r["source"] == "nq"]
    held = holding_rows(full, nq)
    for n, start in enumerate(range(0, len(nq), group)):
        kept = [r for r in nq[start: start + group] if 0 < len(held[r["question"]]) <= max_passages]
        book = book_without(full, set().union(*(held[r["question"]] for r in kept)), work / f"book-without-train-{n}")
        asked.append((kept, book, work / f"own-answers-without-{n}.jsonl"))
    out = []
    for part, book, cache in asked:
        rag.use_knowledge_base(book)
        passages = retrieve_all(rag, part, k)
        got = answer_all(rag, part, cache, k, batch_size, cached_only=False)
        out += [{"row": r, "answer": got[r["question"]]["answer"], "passages": passages[r["question"]]} for r in part]
    return out


def own_answer_pairs(answers: list[dict]) -> list[dict]:
    """Pairs of :func:`own_answers`: each answer with the passages that hold it (and the top one), labelled yes only
    where the answer is right and the passage holds it. The errors the judge must catch, as the generator makes them:
    a span of a passage on the subject that is not the answer."""
    from _abstention_sets import right

    from openbook.eval.retrieval import answer_in_passage

    out = []
    for got in answers:
        row, answer = got["row"], got["answer"].strip()
        if not answer:
            continue
        ok = right(row, answer)
        for i, (_, _, title, text) in enumerate(got["passages"]):
            holds = answer_in_passage(text, [answer])
            if holds or i == 0:
                out.append({"question": row["question"], "title": title, "text": text, "source": row["source"],
                            "answer": answer, "y": int(ok and holds)})
    return out


def balance(pairs: list[dict]) -> dict[tuple[str, int], float]:
    """Weights giving each set's yes and no pairs equal total weight."""
    counts = Counter((p["source"], p["y"]) for p in pairs)
    return {(s, y): (counts[(s, 0)] + counts[(s, 1)]) / (2 * counts[(s, y)]) for s, y in counts}


def settings(pairs: list[dict], reads_answer: bool, pooling: str | None, balanced: bool):
    """(weight of each (set, label), pooling) of a run: balanced per set unless told not, and a judge that reads
    the answer pools its question and answer (``first``) unless told otherwise, any other every token."""
    weight = balance(pairs) if balanced else defaultdict(lambda: 1.0)
    return weight, pooling or ("first" if reads_answer else "mean")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--work", default=None, help="cache of the pairs (default: $OPENBOOK_CACHE/judge)")
    p.add_argument("--out", default=str(REPO / "openbook" / "data" / "default" / "judge.safetensors"))
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reads-answer", action="store_true", help="train a judge that reads the answer too")
    p.add_argument("--limit", type=int, default=None, help="train on the first N pairs only (a quick check)")
    p.add_argument("--pooling", choices=POOLINGS, default=None,
                   help="pool every token or the question (and answer) only; default: first with --reads-answer")
    p.add_argument("--no-balance", action="store_true", help="do not weight each set's yes and no pairs alike")
    p.add_argument("--own-answers", action="store_true",
                   help="with --reads-answer, add the default's own answers to its training questions (asked once)")
    args = p.parse_args(argv)
    if args.own_answers and not args.reads_answer:
        p.error("--own-answers needs --reads-answer: its pairs are answers")
    print_header()
    quiet()
    import torch

    from openbook.models.adapters import LoraSettings
    from openbook.models.judge import PassageJudge
    from openbook.models.loading import cache_dir

    work = Path(args.work) if args.work else cache_dir() / "judge"
    work.mkdir(parents=True, exist_ok=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # before training, not after it
    cached, rows = work / f"pairs-k{args.k}.jsonl", training_rows(Path(args.data_dir))
    if not cached.exists():
        pairs = make_pairs(rows, args.k)
        cached.write_text("".join(json.dumps(pair, ensure_ascii=False) + "\n" for pair in pairs), encoding="utf-8")
    pairs = [json.loads(line) for line in cached.read_text(encoding="utf-8").splitlines()]
    if args.reads_answer:
        pairs = answer_pairs(pairs, rows, args.seed)
        if args.own_answers:
            pairs += own_answer_pairs(own_answers(rows, work, args.k, 8))
    pairs = pairs[: args.limit] if args.limit else pairs
    weight, pooling = settings(pairs, args.reads_answer, args.pooling, not args.no_balance)
    print(f"{len(pairs)} pairs; yes/no per set: "
          + ", ".join(f"{s} {sum(q['y'] for q in pairs if q['source'] == s)}/"
                      f"{sum(1 - q['y'] for q in pairs if q['source'] == s)}" for s in ("nq", "wq", "ct")), flush=True)
    torch.manual_seed(args.seed)
    judge = PassageJudge.new(LoraSettings.from_dict(LORA), reads_answer=args.reads_answer, pooling=pooling)
    judge.train()
    params = [t for t in judge.parameters() if t.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    steps = args.epochs * (len(pairs) // args.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / steps))
    rng, step, start, loss = random.Random(args.seed), 0, time.perf_counter(), None
    for epoch in range(args.epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in range(0, len(order) - args.batch_size + 1, args.batch_size):
            batch = [pairs[j] for j in order[i: i + args.batch_size]]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = judge([q["question"] for q in batch], [(q["title"], q["text"]) for q in batch],
                               [q.get("answer", "") for q in batch])
            y = torch.tensor([q["y"] for q in batch], dtype=torch.float32)
            w = torch.tensor([weight[(q["source"], q["y"])] for q in batch])
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), y, reduction="none") * w).mean()
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            if step % 50 == 0:
                print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.3f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
    judge.save(args.out)
    print(f"wrote {args.out}")
    print(json.dumps({"pairs": len(pairs), "steps": step, "last_loss": round(loss.item(), 4),
                      "seconds": round(time.perf_counter() - start, 1), "lora": LORA, "epochs": args.epochs,
                      "reads_answer": args.reads_answer, "pooling": pooling, "lr": args.lr,
                      "balanced": not args.no_balance, "own_answers": args.own_answers}))


if __name__ == "__main__":
    main()
