"""Split the NQ-open dev split from ../shared/data into a training part and a held-out dev part.

Every fifth question (0-based index divisible by 5) is held out; the rest is for training. Writes
``{question, answers}`` JSON Lines (the gold passages stay out: the model must retrieve them).

Usage: python scripts/split_nq_dev.py ../shared/data/nq-open-oracle.dev-split.jsonl.gz OUT_DIR
"""

import gzip
import json
import sys
from pathlib import Path


def main(source: str, out: str) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    parts = {"train": [], "dev": []}
    for i, rec in enumerate(records):
        parts["dev" if i % 5 == 0 else "train"].append({"question": rec["question"], "answers": rec["answers"]})
    for name, rows in parts.items():
        with open(out_dir / f"nq-{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        print(f"{out_dir / f'nq-{name}.jsonl'}: {len(rows)} questions")


if __name__ == "__main__":
    main(*sys.argv[1:3])
