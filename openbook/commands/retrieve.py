"""``openbook retrieve "QUESTION"``: the retriever alone, no generator.

It loads the query encoder and the knowledge base only: nothing here imports a generator or the RAG model
(:mod:`openbook.models.knowledge` builds the demo knowledge base below :mod:`openbook.rag`).

Shows the top-k passages for a question with their ids, titles, scores and retriever probabilities
p(z|x) = softmax(scale * scores) over the k (:func:`openbook.index.retriever.retrieval_logprobs`). For
the dense retriever the scores are d(z)^T q(x) and scale is the RAG model's default
(:func:`openbook.models.encoders.default_score_scale`: 20 for L2-normalised encoders, else 1); for
``--retriever bm25`` they are BM25 scores and for ``hybrid`` fused reciprocal-rank scores, with scale 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from openbook.commands import options, positive_int


def _demo_knowledge_base(encoder):
    """The shipped demo knowledge base for ``encoder`` (replaced in the CLI tests)."""
    from openbook.models.knowledge import demo_knowledge_base

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
            '  openbook retrieve "capital of France" --kb my-kb --k 10 --json\n'
            '  openbook retrieve "vacation days" --kb my-kb --where source^=handbook/ --where modified>=2026-01-01'
        ),
    )
    retrieve.add_argument("question", metavar="QUESTION")
    options.add_options(retrieve, "kb", "k", "encoder", "retriever", "where", "device")
    retrieve.add_argument("--version", type=positive_int, default=None, metavar="N",
                          help="search this version of the knowledge base (default: its current version)")
    retrieve.add_argument("--json", action="store_true", help="print one JSON object")
    retrieve.set_defaults(handler=_cmd_retrieve)


def _cmd_retrieve(args: argparse.Namespace) -> int:
    from openbook.commands import kb as kb_commands
    from openbook.commands.ask import snippet
    from openbook.errors import InputError
    from openbook.index import load_knowledge_base
    from openbook.index.retriever import make_retriever, retrieval_logprobs
    from openbook.models.encoders import default_score_scale
    from openbook.models.knowledge import encoder_name

    question = args.question.strip()
    if not question:
        raise InputError("the question is empty")
    where = options.where(args)  # a malformed --where fails before any model loads
    # A wrong --kb path fails here, reading the manifest, before any model is loaded.
    device = options.device(args)  # a missing GPU fails before the encoder loads
    encoder = kb_commands.load_encoder(encoder_name(args.encoder, args.kb)).to(device)
    if args.kb is not None:
        kb = load_knowledge_base(args.kb, expected_encoder=encoder.info(), version=args.version)
    else:
        kb = _demo_knowledge_base(encoder)
        if args.version is not None:
            kb.reload(version=args.version)
    name = args.retriever or "dense"
    retriever = make_retriever(name, kb, encode=encoder.encode_queries)
    hits = retriever.retrieve([question], args.k or options.DEFAULT_K, where=where)
    scale = default_score_scale(encoder) if retriever.scaled else 1.0
    scores, rows, passages = hits.scores[0], hits.ids[0], hits.passages[0]
    probs = retrieval_logprobs(hits.scores, scale).exp()[0].tolist()
    results = [
        {"rank": rank, "row": int(row), "id": p.id, "title": p.title, "text": p.text,
         "score": float(score), "prob": float(prob), "meta": dict(p.meta or {})}
        for rank, (row, p, score, prob) in enumerate(zip(rows, passages, scores, probs), start=1)
    ]
    if args.json:
        record = {"question": question, "kb": str(kb.path), "version": kb.version, "k": len(results),
                  "retriever": name, "score_scale": scale, "where": where.describe() if where else None,
                  "passages": results}
        print(json.dumps(record, ensure_ascii=False, indent=2))
        return 0
    book = args.kb if args.kb is not None else "the demo knowledge base"
    matching = f" matching {where.describe()}" if where else ""
    print(f"Top {len(results)} passages{matching} for {question!r} in {book} (version {kb.version}), "
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
