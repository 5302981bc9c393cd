#!/usr/bin/env python
"""Keep the training questions whose answer the knowledge base can supply: an answer string in the top k.

RAG's generator learns to copy an answer from a retrieved passage. A training question whose answer is in
none of its top-k passages teaches it the opposite -- to produce a plausible name anyway, most often the
subject of the passage in front of it (the "title shortcut" of docs/models/default.md). On the demo
knowledge base that is most of WebQuestions and CuratedTrec (answer recall@5 23% and 45%; NQ 97%), whose
answers the demo passages were never chosen to hold. DPR trained on the same sets the same way: "we
discard questions for which no positive passage is found" (Karpukhin et al. 2020, section 5.1).

Usage: python scripts/answerable.py IN.jsonl OUT.jsonl [--k 5] [--kb DIR] [--abstain TEXT [--abstain-share F]]

``--abstain TEXT`` keeps the other side too, as training examples of abstention: the questions none of whose
answers is in the title or text of any top-k passage, as many as the answerable ones at most, each with TEXT as
its only answer (a question with only some answer elsewhere in the top k is left out: its label is unclear).
``--abstain-share F`` keeps fewer of them: at most a share F of the whole mix (0.5, the default, is as many as the
answerable ones).

IN holds ``{question, answers}`` lines; matching is DPR's has_answer on the answer strings the model is
trained to write (the first answer of each line is its target). Prints one JSON line of counts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def partition(rows: list[dict], found: list[list], abstain: str | None,
              share: float = 0.5) -> tuple[list[dict], list[dict]]:
    """(the rows whose first answer is in the text of one of their passages ``found``, and, with ``abstain``, the
    first of those with no answer in any title or text, each answered ``abstain``, at most a ``share`` of the two
    together: as many as the first at most at 0.5)."""
    if not 0 <= share <= 0.5:
        raise ValueError(f"abstain share {share}: must be between 0 and 0.5")
    from openbook.eval.retrieval import answer_in_passage

    kept, unanswerable = [], []
    for row, passages in zip(rows, found):
        if any(answer_in_passage(p.text, row["answers"][:1]) for p in passages):
            kept.append(row)
        elif not any(answer_in_passage(f"{p.title} {p.text}", row["answers"]) for p in passages):
            unanswerable.append({"question": row["question"], "answers": [abstain]})
    return kept, unanswerable[: math.floor(len(kept) * share / (1 - share) + 1e-9)] if abstain else []


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--kb", default=None, help="knowledge base (default: the shipped demo knowledge base)")
    p.add_argument("--abstain", metavar="TEXT",
                   help="also keep the questions with no answer in the top k, answered TEXT")
    p.add_argument("--abstain-share", type=float, default=0.5, metavar="F",
                   help="with --abstain: at most this share of the training mix abstains (at most 0.5)")
    args = p.parse_args(argv)

    from openbook.commands import kb as kb_commands
    from openbook.eval.datasets import read_nq_open
    from openbook.index import KnowledgeBase
    from openbook.index.retriever import make_retriever
    from openbook.rag.assemble import demo_knowledge_base, encoder_name

    rows = [{"question": r["question"], "answers": r["answers"]} for r in read_nq_open(args.inp)]
    encoder = kb_commands.load_encoder(encoder_name(None, args.kb))
    kb = demo_knowledge_base(encoder) if args.kb is None else KnowledgeBase.load(args.kb, expected_encoder=encoder.info())
    retriever = make_retriever("dense", kb, encode=encoder.encode_queries)
    found = []
    for start in range(0, len(rows), 64):
        found += retriever.retrieve([r["question"] for r in rows[start: start + 64]], args.k).passages
    if not 0 <= args.abstain_share <= 0.5:
        p.error(f"--abstain-share {args.abstain_share}: must be between 0 and 0.5")
    kept, abstaining = partition(rows, found, args.abstain, args.abstain_share)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept + abstaining), encoding="utf-8")
    tmp.replace(args.out)
    print(json.dumps({"in": args.inp, "out": args.out, "k": args.k, "questions": len(rows), "kept": len(kept),
                      "abstaining": len(abstaining)}))


if __name__ == "__main__":
    main()
