"""``openbook export RUN --format transformers --out DIR``: a trained run as a transformers RAG model."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    """Add the ``export`` command to the top-level ``subparsers``."""
    export = subparsers.add_parser(
        "export",
        help="write a trained run as a transformers RagSequenceForGeneration / RagTokenForGeneration directory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Write the trained model of RUN (`openbook train --out RUN`) as a transformers RAG model:\n"
            "config.json (RagConfig), model.safetensors, question_encoder_tokenizer/ and generator_tokenizer/,\n"
            "loadable with RagSequenceForGeneration.from_pretrained(DIR) (RagTokenForGeneration for a\n"
            "rag-token run) and giving the same loss as openbook. The generator must be an encoder-decoder\n"
            "(BART, T5) and the query encoder DPR or BERT with CLS pooling; the knowledge base is not\n"
            "exported (transformers retrieves through its own RagRetriever index)."
        ),
        epilog="example:\n  openbook export runs/nq --format transformers --out rag-nq",
    )
    export.add_argument("run", metavar="RUN", help="a training run directory (run.json + checkpoint/)")
    export.add_argument("--format", choices=("transformers",), default="transformers",
                        help="what to write (default: %(default)s)")
    export.add_argument("--out", required=True, metavar="DIR", help="the directory to write (must be new or empty)")
    export.add_argument("--force", action="store_true", help="replace DIR if it holds an earlier export")
    export.add_argument("--json", action="store_true", help="print one JSON object")
    export.set_defaults(handler=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    from openbook.train.export import EXPORT_NOTE, export_run

    out = export_run(args.run, args.out, format=args.format, force=args.force)
    note = json.loads((out / EXPORT_NOTE).read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps({"out": str(out), **note}))
    else:
        print(f"exported {args.run} ({note['model']}) to {out}: load it with "
              f"transformers.{note['class']}.from_pretrained({str(out)!r})")
    return 0
