#!/usr/bin/env python
"""Split the open-domain QA data in ../shared/data into training parts and held-out parts.

For each set, every fifth question (0-based index divisible by 5) is held out and the rest is for
training; nothing held out is ever trained on. Writes, into OUT_DIR:

* ``nq-train.jsonl`` / ``nq-dev.jsonl`` -- the NQ-open dev split (``{question, answers}``; the gold passages
  stay out: the model must retrieve them). ``nq-dev.jsonl`` is the "held-out fifth";
* ``webquestions-train.json`` / ``webquestions-heldout.json`` -- WebQuestions' training file, in its own
  format (a JSON array of ``{qId, qText, answers}``), read by ``--task webquestions``;
* ``curatedtrec-train.tsv`` / ``curatedtrec-heldout.tsv`` -- CuratedTrec's training file (TSV whose answers
  are regular expressions), read by ``--task curatedtrec``;
* ``webquestions-heldout.jsonl`` / ``curatedtrec-heldout.jsonl`` -- the same held-out questions as
  ``{question, answers}`` for ``openbook eval retrieval`` (CuratedTrec's answers stay patterns: ``--match regex``);
* ``default-train.jsonl`` -- the training data of the shipped default model: the three training parts as
  ``{question, answers}`` (CuratedTrec's regex turned into a plain answer by
  :func:`openbook.eval.tasks.qa.regex_target`): every NQ training question and the first half as many from
  each of the other two, so that NQ (whose answers the demo knowledge base holds) is half of the mixture and
  the noisier WebQuestions answers (Freebase lists) and CuratedTrec regexes a quarter each;
* ``jeopardy-train.jsonl`` / ``jeopardy-heldout.jsonl`` -- Jeopardy question generation (paper Tables 2 and 5),
  the records unchanged (``{context: "CATEGORY: clue", continuation: answer, category}``), read by
  ``--task jeopardy``;
* ``fever-train.jsonl`` / ``fever-heldout.jsonl`` -- the FEVER claims, the official records unchanged (with
  their evidence titles), read by ``--task fever3`` / ``fever2``.

Usage: python scripts/split_qa_data.py [--data-dir ../shared/data] [--out runs/data]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openbook.eval.tasks.qa import regex_target  # noqa: E402


def split(rows: list) -> tuple[list, list]:
    """(training part, held-out part): every fifth row (index 0, 5, 10 ...) is held out."""
    return [r for i, r in enumerate(rows) if i % 5], [r for i, r in enumerate(rows) if i % 5 == 0]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(f"{path}: {len(rows)} questions")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--out", default=str(REPO / "runs" / "data"))
    args = p.parse_args(argv)
    data, out = Path(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    with gzip.open(data / "nq-open-oracle.dev-split.jsonl.gz", "rt", encoding="utf-8") as fh:
        nq = [{"question": r["question"], "answers": r["answers"]} for r in map(json.loads, fh) if r]
    nq_train, nq_dev = split(nq)
    write_jsonl(out / "nq-train.jsonl", nq_train)
    write_jsonl(out / "nq-dev.jsonl", nq_dev)

    wq_train, wq_heldout = split(json.loads((data / "webquestions.train.json").read_text(encoding="utf-8")))
    for name, rows in (("train", wq_train), ("heldout", wq_heldout)):
        (out / f"webquestions-{name}.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
        print(f"{out / f'webquestions-{name}.json'}: {len(rows)} questions")

    ct_lines = [line for line in (data / "curatedtrec.train.tsv").read_text(encoding="utf-8").splitlines() if line]
    ct_train, ct_heldout = split(ct_lines)
    for name, lines in (("train", ct_train), ("heldout", ct_heldout)):
        (out / f"curatedtrec-{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{out / f'curatedtrec-{name}.tsv'}: {len(lines)} questions")
    # the held-out parts as {question, answers} JSON Lines too, for `openbook eval retrieval` (answer recall@k;
    # CuratedTrec's answers are patterns: --match regex)
    write_jsonl(out / "webquestions-heldout.jsonl", [{"question": r["qText"], "answers": r["answers"]} for r in wq_heldout])
    write_jsonl(out / "curatedtrec-heldout.jsonl", [{"question": q, "answers": [rx]} for q, rx in
                                                    (line.split("\t", 3)[2:4] for line in ct_heldout)])

    for name, source in (("jeopardy", "jeopardy.dev-split.jsonl.gz"), ("fever", "fever.paper_dev.dev-split.jsonl.gz")):
        with gzip.open(data / source, "rt", encoding="utf-8") as fh:
            records = [line for line in fh.read().splitlines() if line.strip()]
        for part, lines in zip(("train", "heldout"), split(records)):
            (out / f"{name}-{part}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
            print(f"{out / f'{name}-{part}.jsonl'}: {len(lines)} records")

    wq = [{"question": r["qText"], "answers": r["answers"]} for r in wq_train]
    ct = [{"question": q, "answers": [regex_target(rx)]} for q, rx in
          (line.split("\t", 3)[2:4] for line in ct_train)]
    share = len(nq_train) // 2
    mixed = [r for group in itertools.zip_longest(nq_train, wq[:share], ct[:share]) for r in group if r is not None]
    write_jsonl(out / "default-train.jsonl", mixed)


if __name__ == "__main__":
    main()
