"""The question sets of ``bench/abstention.py`` and how they are asked: the held-out and fresh questions, their
retrieved passages (with the passage judge's logits) and cached answers, and the *deleted-answer* questions: the
same questions asked of a copy of the demo book without the passages that hold their answers.

Two kinds of unanswerable question come out of these. ``bench/abstention.py``'s first kind is found by string
matching: a WebQuestions or CuratedTrec question none of whose gold answers is in the top k. That label is noisy: a
WebQuestions gold answer is a Freebase name ("Danish Language", "Kingdom of Great Britain"), so a passage saying
"Danish ... is spoken ... in Denmark" does not "hold" it and a question the book does answer counts as one it
cannot. The second kind, :func:`without_answers`, has no such noise: questions whose answers the demo book holds in
at most ``max_passages`` passages (a question whose answer is a year, a small number or a common name is left out,
so that the deletion stays small), asked of a copy of the book with every passage whose title or text holds one of
their answers deleted. The copy keeps the rest of the book, and with it the articles around each answer: the hard
case, where the book knows the subject and not the fact, as when a user's document is missing from their book.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from _common import nq_split  # noqa: E402
from split_qa_data import split  # noqa: E402


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


def golds_of(data_dir: Path) -> dict[str, dict]:
    """Every question the abstention benches ask (held-out and fresh) -> its ``{question, answers, mode}``."""
    nq, other = load_sets(data_dir)
    return {r["question"]: r for r in nq + other + load_fresh(data_dir, len(nq_split(data_dir)[0]))}


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """``rows`` as a JSON Lines file to read (the benches' ``--export``)."""
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def retrieve_all(rag, rows: list[dict], k: int) -> dict[str, list[tuple]]:
    """question -> its top k as ``(d(z)^T q(x), p(z|x), title, text)``, as `ask` reads them."""
    out = {}
    for start in range(0, len(rows), 64):
        batch = [r["question"] for r in rows[start: start + 64]]
        found = rag.retrieve(batch, k)
        for question, passages, scores, logprobs in zip(batch, found.passages, found.scores.tolist(),
                                                        found.doc_logprobs.exp().tolist()):
            out[question] = [(s, p, z.title, z.text) for s, p, z in zip(scores, logprobs, passages)]
    return out


def judge_all(rag, passages: dict[str, list[tuple]], answers: dict[str, str], cache: Path) -> dict[str, list[tuple]]:
    """``passages`` (:func:`retrieve_all`'s) with the model's passage-judge logit of each as a fifth item, as `ask`
    judges them (with the question's answer in ``answers``, for a judge that reads it); the logits are cached in
    ``cache``, kept per judge file and dtype. Without a judge, ``passages`` as they are."""
    judge = rag.passage_judge
    if judge is None:
        return passages
    import hashlib

    # the shipped default's judge (loaded from its file when first used) is known by its file's hash and its dtype
    key = f"{hashlib.sha256(judge.path.read_bytes()).hexdigest()[:16]}-{judge.dtype}"
    cache = cache.with_name(f"{cache.stem}-{key}{cache.suffix}")
    logits = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
    keys = {q: f"{q}\t{answers[q]}" for q in passages if q in answers}  # a judge may read the answer
    todo = [q for q, key in keys.items() if key not in logits]
    start_time = time.perf_counter()
    for start in range(0, len(todo), 64):
        batch = todo[start: start + 64]
        pairs = [(q, (title, text)) for q in batch for _, _, title, text in passages[q]]
        scored = iter(judge.score([q for q, _ in pairs], [p for _, p in pairs], [answers[q] for q, _ in pairs]))
        for q in batch:
            logits[keys[q]] = [next(scored) for _ in passages[q]]
        print(f"  judged {start + len(batch)}/{len(todo)} questions' passages ({time.perf_counter() - start_time:.0f} s)",
              flush=True)
    if todo:
        cache.write_text(json.dumps(logits), encoding="utf-8")
    return {q: [seen + (logit,) for seen, logit in zip(found, logits[keys[q]])] if q in keys else found
            for q, found in passages.items()}


def has_answer(row: dict, passages: list[tuple[float, float, str, str]]) -> bool:
    from openbook.eval.retrieval import answer_in_passage

    return any(answer_in_passage(seen[3], row["answers"], row["mode"]) for seen in passages)


def right(row: dict, answer: str) -> bool:
    from openbook.eval.metrics.answers import exact_match, regex_match

    return bool((regex_match if row["mode"] == "regex" else exact_match)(answer, row["answers"]))


def item_id(question: str) -> str:
    """A question's id in the provenance labels (``bench/abstention_provenance.py``)."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()[:12]


def read_labels(path: Path, key: str = "supported") -> dict[str, bool]:
    """id -> the label ``key``, from a JSON Lines file of ``{id, <key>, ...}``: by default the provenance labels of
    the right answers today (``bench/data/abstention-provenance.jsonl``); ``held`` for the read labels of the
    unanswerable side (``bench/data/abstention-unanswerable.jsonl``)."""
    labels = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if not isinstance(row.get(key), bool):
                raise SystemExit(f"{path}:{n}: {key!r} must be true or false")
            labels[row["id"]] = row[key]
    return labels


def supported(questions: list[str], labels: dict[str, bool] | None) -> list[str]:
    """The right answers' ``questions`` that a passage supports by ``labels`` (all of them without labels; every
    one must have a label)."""
    if labels is None:
        return list(questions)
    missing = [q for q in questions if item_id(q) not in labels]
    if missing:
        raise SystemExit(f"{len(missing)} right answers have no label, e.g. {missing[0]!r}: read them first")
    return [q for q in questions if labels[item_id(q)]]


def supported_only(items: list[dict], labels: dict[str, bool]) -> list[dict]:
    """``items`` without the right answers labelled unsupported (every right answer must have a label)."""
    keep = set(supported([it["question"] for it in items if it["kind"] == "right"], labels))
    return [it for it in items if it["kind"] != "right" or it["question"] in keep]


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


def holding_rows(kb, rows: list[dict]) -> dict[str, set[str]]:
    """question -> the ids of ``kb``'s live passages whose title or text holds one of its answers (DPR's
    ``has_answer``, CuratedTrec's patterns as regexes; a passage is matched in full only when it has every word
    of some answer, which a DPR match implies)."""
    from openbook.eval.retrieval import answer_in_passage
    from openbook.rag.abstain import words

    live = [(p.id, f"{p.title} {p.text}") for _, p in kb.live_rows()]
    postings: dict[str, set[int]] = {}  # word -> the passages that have it
    for i, (_, text) in enumerate(live):
        for word in set(words(text)):
            postings.setdefault(word, set()).add(i)
    out = {}
    for r in rows:
        if r["mode"] == "dpr":  # only passages with every word of some answer can hold it
            candidates = set().union(*(set.intersection(*(postings.get(w, set()) for w in needed))
                                       for needed in map(set, map(words, r["answers"])) if needed))
        else:
            candidates = range(len(live))
        out[r["question"]] = {live[i][0] for i in candidates if answer_in_passage(live[i][1], r["answers"], r["mode"])}
    return out


def book_without(kb, ids: set[str], out: Path):
    """A copy of ``kb`` at ``out`` with the passages ``ids`` deleted as one new version (reused when it exists
    and deleted the same passages; written to a temporary folder and renamed, so a killed run leaves none)."""
    from openbook.index.kb.api import KnowledgeBase

    record = out / "deleted-ids.json"
    if record.exists() and set(json.loads(record.read_text(encoding="utf-8"))) == ids:
        return KnowledgeBase.load(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(kb.path, tmp)
    KnowledgeBase.load(tmp).delete(sorted(ids), description="answers deleted by bench/abstention.py")
    (tmp / "deleted-ids.json").write_text(json.dumps(sorted(ids)), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return KnowledgeBase.load(out)


def ask_without(rag, rows: list[dict], name: str, work: Path, k: int, batch_size: int, max_passages: int,
                cached_only: bool) -> dict:
    """The deleted-answer questions of ``rows`` (module docs) asked of their book (``work/book-without-NAME``) as
    `ask` asks: ``{"kept", "deleted", "book", "answers", "passages", "leaked"}`` (the rows kept, the passage ids
    deleted, the book, the cached answers, the judged top k and the questions whose top k still hold an answer, a
    bug if any). ``rag`` gets its book back after."""
    full = rag.kb
    held = holding_rows(full, rows)
    kept = [r for r in rows if 0 < len(held[r["question"]]) <= max_passages]
    deleted = set().union(*(held[r["question"]] for r in kept))
    book = book_without(full, deleted, work / f"book-without-{name}")
    rag.use_knowledge_base(book)
    try:
        passages = retrieve_all(rag, kept, k)
        got = answer_all(rag, kept, work / f"answers-without-{name}.jsonl", k, batch_size, cached_only)
        passages = judge_all(rag, passages, {q: g["answer"] for q, g in got.items()},
                             work / f"judged-without-{name}.json")
    finally:
        rag.use_knowledge_base(full)
    leaked = {r["question"] for r in kept if has_answer(r, passages[r["question"]])}
    return {"kept": kept, "deleted": deleted, "book": book, "answers": got, "passages": passages, "leaked": leaked}


def without_answers(rag, rows: list[dict], name: str, work: Path, k: int, batch_size: int, max_passages: int,
                    cached_only: bool) -> tuple[dict[str, dict], dict]:
    """The deleted-answer questions of ``rows`` (:func:`ask_without`): ``(question -> its abstention features,
    counts)``."""
    from openbook.rag.abstain import abstain_features

    asked = ask_without(rag, rows, name, work, k, batch_size, max_passages, cached_only)
    kept, got, passages, leaked = asked["kept"], asked["answers"], asked["passages"], asked["leaked"]
    feats = {r["question"]: abstain_features(r["question"], got[r["question"]]["answer"], passages[r["question"]],
                                             got[r["question"]]["logprob"])
             for r in kept if r["question"] in got and r["question"] not in leaked}
    counts = {"questions": len(rows), "kept": len(kept), "deleted_passages": len(asked["deleted"]),
              "leaked": len(leaked),
              "right_anyway": sum(right(r, got[r["question"]]["answer"]) for r in kept if r["question"] in feats)}
    return feats, counts
