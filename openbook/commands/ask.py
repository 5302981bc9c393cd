"""``openbook ask "QUESTION"``: answer questions with a RAG model and show the passages it retrieved.

``openbook ask --file QUESTIONS.txt`` answers many questions in one process, in batches. The model comes
from :func:`openbook.commands.options.model_from_args` (replaced by a stub in the CLI tests).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from openbook.commands import finite_float, options
from openbook.errors import InputError, OpenbookError, one_line
from openbook.presets import INTERACTIVE, PAPER
from openbook.progress import progress_bar

SNIPPET_CHARS = 160


def register(subparsers) -> None:
    """Add the ``ask`` command to the top-level ``subparsers``."""
    ask = subparsers.add_parser(
        "ask",
        help="answer a question (or a file of questions) and show the retrieved passages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Answer QUESTION, or every line of --file, with RAG-Sequence or RAG-Token. Prints the\n"
            "answer, then the top-k passages with their retriever probability p(z|x). The default\n"
            "knowledge base is the small demo one shipped with openbook; its index is built on first use."
        ),
        epilog=(
            "examples:\n"
            '  openbook ask "Who got the first Nobel Prize in Physics?"\n'
            '  openbook ask "Who wrote Hamlet?" --model rag-token --k 10 --json\n'
            "  openbook ask --file questions.txt --json > answers.jsonl\n"
            '  openbook ask "How many vacation days?" --kb my-kb --where source^=handbook/\n\n'
            "defaults (the interactive preset, as RAG.ask's and POST /v1/ask's): greedy search, Lazy decoding\n"
            "(Fast decoding's answer, reading passages only until it is settled), "
            f"{INTERACTIVE.max_new_tokens} new tokens, bfloat16\n"
            "where the CPU computes it natively: quick short answers. The paper's decoding, as `openbook eval`\n"
            "uses by default (the paper preset; eval's answer length is the task's):\n"
            f"  openbook ask \"Who wrote Hamlet?\" {PAPER.flags()}"
        ),
    )
    ask.add_argument("question", nargs="?", metavar="QUESTION", help="the question to answer")
    ask.add_argument("--file", metavar="QUESTIONS.txt",
                     help="answer every question in this file, one per line (blank lines skipped; '-' reads stdin)")
    options.add_options(ask, "model", "k", "retriever", "where", "beams", "decoding", "run", "kb", "generator", "untrained", "encoder",
                        "max-new-tokens", "dtype", "device", "batch-size", preset=INTERACTIVE)
    options.add_options(ask, "quiet")  # a bar over the questions of --file
    ask.add_argument("--min-new-tokens", type=int, metavar="N", default=0,
                     help="shortest answer, in generator tokens (default: %(default)s)")
    ask.add_argument("--length-penalty", type=finite_float, metavar="X", default=1.0,
                     help="beam score = log p / length**X, as in transformers (default: %(default)s)")
    ask.add_argument("--no-abstain", dest="abstain", action="store_false", default=INTERACTIVE.abstain,
                     help="answer even when the knowledge base does not seem to hold the answer (by default ask "
                          "abstains then, with the model's calibrated threshold; the paper preset never does)")
    ask.add_argument("--abstain-threshold", type=finite_float, metavar="X", default=None,
                     help="abstain below this score instead of the model's calibrated threshold (a model without "
                          "one never abstains unless given this)")
    ask.add_argument("--json", action="store_true",
                     help="print one JSON object (with --file: JSON Lines, one object per question, in input order)")
    ask.set_defaults(handler=_cmd_ask, subparser=ask)


def _cmd_ask(args: argparse.Namespace) -> int:
    if (args.question is None) == (args.file is None):
        args.subparser.error("give exactly one of QUESTION or --file")  # exits with status 2

    decoding = args.decoding
    if args.decoding != INTERACTIVE.decoding and args.model not in (None, "rag-sequence"):
        warnings.warn(f"--decoding {args.decoding} applies to --model rag-sequence only; ignored for {args.model}", stacklevel=2)
        decoding = INTERACTIVE.decoding

    # Read the questions before loading any model, so a wrong path fails in milliseconds.
    numbered = _read_questions(args.file) if args.file is not None else []
    where = options.where(args)

    rag = options.model_from_args(args)
    settings = {"k": args.k, "num_beams": args.beams, "decoding": decoding,
                "max_new_tokens": args.max_new_tokens}
    if args.k is None:  # the model's own k (5, or the run's)
        del settings["k"]
    if where is not None:
        settings["where"] = where
    settings.update(_abstain_settings(args))
    if args.min_new_tokens or args.length_penalty != 1.0:  # only pass what differs from the defaults
        settings.update(min_new_tokens=args.min_new_tokens, length_penalty=args.length_penalty)

    if args.file is None:
        (answer,) = _ask(rag, [args.question], settings, where=None)
        if args.json:
            print(json.dumps(answer_record(answer), ensure_ascii=False, indent=2))
        else:
            _print_answer(answer, sys.stdout)
        return 0

    first = True
    bar = progress_bar(total=len(numbered), desc="answering", unit="question", enabled=not args.quiet)
    for batch in _batches(numbered, args.batch_size):
        lines = [n for n, _ in batch]
        where = f"{args.file}, line {lines[0]}" if len(lines) == 1 else f"{args.file}, lines {lines[0]}-{lines[-1]}"
        answers = _ask(rag, [q for _, q in batch], settings, where=where)
        for answer in answers:
            if args.json:
                print(json.dumps(answer_record(answer), ensure_ascii=False))
            else:
                if not first:
                    print()
                print(f"Q: {answer.question}")
                _print_answer(answer, sys.stdout)
            first = False
        sys.stdout.flush()
        bar.update(len(batch))
    bar.close()
    return 0


def _abstain_settings(args: argparse.Namespace) -> dict:
    """``abstain`` / ``abstain_threshold`` for ``rag.ask``, only where they differ from its defaults."""
    settings = {} if args.abstain == INTERACTIVE.abstain else {"abstain": args.abstain}
    if args.abstain_threshold is not None:
        settings["abstain_threshold"] = args.abstain_threshold
    return settings


def _ask(rag: Any, questions: list[str], settings: dict, where: str | None) -> list:
    try:
        answers = list(rag.ask(questions, **settings))
    except OpenbookError as error:
        if where is None:
            raise
        # Name the lines of the file: "question 2" in the message counts within this batch.
        raise OpenbookError(f"{where}: {error}") from error
    if len(answers) != len(questions):
        raise RuntimeError(f"RAG.ask returned {len(answers)} answers for {len(questions)} questions")
    return answers


def _read_questions(path: str) -> list[tuple[int, str]]:
    """``(line number, question)`` for every non-blank line of ``path`` ('-': standard input)."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except FileNotFoundError:
        raise InputError(f"questions file not found: {path}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"questions file {path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise InputError(f"cannot read questions file {path}: {error.strerror or error}") from None
    questions = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not questions:
        raise InputError(f"questions file {path} has no questions (every line is blank)")
    return questions


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --------------------------------------------------------------------------------------------------
# Output


def answer_record(answer: Any) -> dict:
    """The JSON form of an answer: ``question``, ``answer``, ``model``, ``truncated`` (decoding hit the
    token limit and the answer was cut back to a sensible boundary), ``abstained`` with ``abstain_score`` and
    ``abstain_threshold`` (:mod:`openbook.rag.abstain`; RAG answers), ``passages`` (each with its ``meta``
    object, ``{}`` when it has none)."""
    return {
        "question": str(answer.question),
        "answer": str(answer.answer),
        "model": str(answer.model),
        "truncated": bool(getattr(answer, "truncated", False)),
        **(answer.abstention() if hasattr(answer, "abstention") else {}),
        "passages": [
            {
                "id": _plain(p.id),
                "title": str(p.title),
                "text": str(p.text),
                "score": float(p.score),
                "prob": float(p.prob),
                "meta": dict(getattr(p, "meta", None) or {}),
            }
            for p in answer.passages
        ],
    }


def _plain(value: Any) -> Any:
    """An id as JSON can hold it (numpy integers become int)."""
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def snippet(text: str, width: int = SNIPPET_CHARS) -> str:
    """``text`` on one line, cut at a word boundary to at most ``width`` characters."""
    flat = one_line(text)
    if len(flat) <= width:
        return flat
    cut = flat[: width - 3]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "..."


def abstention_message(score: float, threshold: float) -> str:
    """The one line that stands for an answer when ask abstains."""
    return (f"The knowledge base does not seem to hold the answer (score {score:.3f} below the threshold "
            f"{threshold:.3f}; --no-abstain answers anyway).")


def _print_answer(answer: Any, out: TextIO) -> None:
    if getattr(answer, "abstained", False):
        print(abstention_message(answer.abstain_score, answer.abstain_threshold), file=out)
    else:
        print(answer.answer, file=out)
        if getattr(answer, "truncated", False):
            print("(cut short by the token limit: --max-new-tokens N allows a longer answer)", file=out)
    passages = list(answer.passages)
    if not passages:
        return
    print(file=out)
    print(f"Top {len(passages)} passages ({answer.model}), with retriever probability p(z|x):", file=out)
    indent = " " * 13
    for rank, p in enumerate(passages, start=1):
        title = one_line(p.title) or "(untitled)"
        print(f"{rank:>3}. {100.0 * float(p.prob):5.1f}%  {title}", file=out)
        print(f"{indent}{snippet(p.text)}", file=out)

