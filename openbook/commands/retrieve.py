"""``openbook retrieve "QUESTION"``: the retriever alone, no generator.

Shows the top-k passages for a question with their ids, titles, inner-product scores d(z)^T q(x) and
retriever probabilities p(z|x) = softmax(scale * scores) over the k, where scale is the RAG model's
default (:func:`openbook.models.encoders.default_score_scale`: 20 for L2-normalised encoders, else 1).
"""

from __future__ import annotations

import argparse
import json
import sys

from openbook.commands import positive_int


def _demo_knowledge_base(encoder):
    """The shipped demo knowledge base for ``encoder`` (replaced in the CLI tests)."""
    from openbook.rag.assemble import demo_knowledge_base

    return demo_knowledge_base(encoder)


def register(subparsers) -> None:
    """Add the ``retrieve`` command to the top-level ``subparsers``."""
    retrieve = subparsers.add_parser(
        "retrieve",
        help="show the passages the retriever finds for a question, with p(z|x) (no generator)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Encode QUESTION with the query encoder, search the knowledge base and print the top k\n"
            "passages with their ids, titles, scores d(z)^T q(x) and retriever probability p(z|x)."
        ),
        epilog=(
            "examples:\n"
            '  openbook retrieve "Who wrote Hamlet?"\n'
            '  openbook retrieve "capital of France" --kb my-kb --k 10 --json'
        ),
    )
    retrieve.add_argument("question", metavar="QUESTION")
    retrieve.add_argument("--kb", metavar="DIR", default=None,
                          help="knowledge-base directory (default: the shipped demo knowledge base)")
    retrieve.add_argument("--k", type=positive_int, default=5, help="passages to show (default: %(default)s)")
    retrieve.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                          help="query encoder (default: the one the knowledge base was built with; for the "
                               "demo knowledge base the offline all-MiniLM-L6-v2)")
    retrieve.add_argument("--version", type=positive_int, default=None, metavar="N",
                          help="search this version of the knowledge base (default: its current version)")
    retrieve.add_argument("--json", action="store_true", help="print one JSON object")
    retrieve.set_defaults(handler=_cmd_retrieve)


def retriever_probabilities(scores, scale: float):
    """p(z|x) = softmax(scale * scores) over the last axis (numerically stable, float64)."""
    import numpy as np

    logits = np.asarray(scores, dtype=np.float64) * scale
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


def _cmd_retrieve(args: argparse.Namespace) -> int:
    from openbook.cli import snippet
    from openbook.commands import kb as kb_commands
    from openbook.errors import InputError
    from openbook.index import KnowledgeBase
    from openbook.index.kb import read_manifest
    from openbook.models.encoders import default_score_scale

    question = args.question.strip()
    if not question:
        raise InputError("the question is empty")
    if args.kb is not None:
        manifest = read_manifest(args.kb)  # a wrong path fails before any model is loaded
        encoder = kb_commands.load_encoder(args.encoder or manifest["encoder"].get("name") or "default")
        kb = KnowledgeBase.load(args.kb, expected_encoder=encoder.info(), version=args.version)
    else:
        encoder = kb_commands.load_encoder(args.encoder or "default")
        kb = _demo_knowledge_base(encoder)
        if args.version is not None:
            kb.reload(version=args.version)
    scale = default_score_scale(encoder)
    scores, rows = kb.search(encoder.encode_queries([question]), args.k)
    probs = retriever_probabilities(scores[0], scale)
    passages = kb.passages(rows[0])
    results = [
        {"rank": rank, "row": int(row), "id": p.id, "title": p.title, "text": p.text,
         "score": float(score), "prob": float(prob)}
        for rank, (row, p, score, prob) in enumerate(zip(rows[0], passages, scores[0], probs), start=1)
    ]
    if args.json:
        record = {"question": question, "kb": str(kb.path), "version": kb.version, "k": len(results),
                  "score_scale": scale, "passages": results}
        print(json.dumps(record, ensure_ascii=False, indent=2))
        return 0
    where = args.kb if args.kb is not None else "the demo knowledge base"
    print(f"Top {len(results)} passages for {question!r} in {where} (version {kb.version}), "
          f"with retriever probability p(z|x):")
    for r in results:
        title = " ".join(r["title"].split()) or "(untitled)"
        print(f"{r['rank']:>3}. {100.0 * r['prob']:5.1f}%  {title}  [{r['id']}]  score {r['score']:.4f}")
        print(f"{' ' * 13}{snippet(r['text'])}")
    sys.stdout.flush()
    kb.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `openbook retrieve ...`")
