"""The ``openbook`` command line.

``openbook ask "QUESTION"`` answers one question with a RAG model over a knowledge base and shows the
passages the retriever found, with their prior p_eta(z|x). ``openbook ask --file QUESTIONS.txt``
answers many questions in one process, in batches.

Nothing heavy is imported at module level: ``openbook --help`` must not pay for torch or transformers.
The RAG layer is reached only through :func:`_load_rag`, which tests replace with a stub.
"""

from __future__ import annotations

import argparse
import importlib
import contextlib
import json
import os
import sys
import warnings
from typing import Any, Iterator, Sequence, TextIO

from openbook import __version__
from openbook.errors import InputError, OpenbookError
from openbook.commands import positive_int

PROG = "openbook"
SNIPPET_CHARS = 160
MODELS = ("rag-sequence", "rag-token")
DECODINGS = ("thorough", "fast")

# Defaults, shared by the parser, the help text and the call to the RAG layer.
DEFAULT_K = 5
DEFAULT_BEAMS = 4
DEFAULT_DECODING = "thorough"
DEFAULT_MAX_NEW_TOKENS = 32
DEFAULT_BATCH_SIZE = 8


def _load_rag(model: str, kb: str | None, generator: str, encoder: str, run: str | None = None) -> Any:
    """Build the RAG model the command will query (replaced by a stub in the CLI tests): from names, or
    the trained model of an ``openbook train --out RUN`` directory (``model``, if given, overrides the
    run's kind, e.g. decoding RAG-Sequence-trained weights as RAG-Token)."""
    quiet_libraries()
    if run is not None:
        from openbook.rag.assemble import load_run

        return load_run(run, kb=kb, **({"model": model} if model else {}))
    from openbook.rag import RAG  # lazy: pulls in torch and transformers

    return RAG.load(model=model or "rag-sequence", kb=kb, generator=generator, encoder=encoder)


def quiet_libraries() -> None:
    """Keep transformers' per-load progress bars and advice off the terminal: openbook prints its own
    progress for the slow one-time jobs (building a knowledge base, converting the generator)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# --------------------------------------------------------------------------------------------------
# Parsing




# Command groups beyond `ask`: each module has `register(subparsers)` and sets `handler` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "openbook.commands.eval",
    "openbook.commands.kb",
    "openbook.commands.retrieve",
    "openbook.commands.train",
    "openbook.commands.experiments",
    "openbook.commands.export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Retrieval-Augmented Generation (Lewis et al., 2020): answer questions with a generator "
            "conditioned on passages retrieved from a knowledge base."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    ask = commands.add_parser(
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
            "  openbook ask --file questions.txt --json > answers.jsonl"
        ),
    )
    ask.add_argument("question", nargs="?", metavar="QUESTION", help="the question to answer")
    ask.add_argument(
        "--file",
        metavar="QUESTIONS.txt",
        help="answer every question in this file, one per line (blank lines skipped; '-' reads stdin)",
    )
    ask.add_argument(
        "--model",
        choices=MODELS,
        default=None,
        help="how documents are marginalised: one document per answer (rag-sequence, eq. 1) or per "
        "token (rag-token, eq. 2) (default: rag-sequence, or the --run's)",
    )
    ask.add_argument(
        "--k", type=positive_int, default=DEFAULT_K, help="passages retrieved per question (default: %(default)s)"
    )
    ask.add_argument(
        "--beams", type=positive_int, default=DEFAULT_BEAMS, help="beam size (default: %(default)s)"
    )
    ask.add_argument(
        "--decoding",
        choices=DECODINGS,
        default=None,
        help="RAG-Sequence decoding: 'thorough' rescores every candidate under every passage, 'fast' "
        f"treats candidates missing from a passage's beam as probability 0 (default: {DEFAULT_DECODING})",
    )
    ask.add_argument(
        "--run",
        metavar="DIR",
        default=None,
        help="answer with the model trained by `openbook train --out DIR` (its generator, query encoder, "
        "knowledge base and kind, unless --model/--kb say otherwise)",
    )
    ask.add_argument(
        "--kb", metavar="DIR", default=None, help="knowledge-base directory (default: the shipped demo knowledge base)"
    )
    ask.add_argument(
        "--generator",
        metavar="NAME_OR_PATH",
        default="default",
        help="generator p_theta: a model name or local path (default: the offline SmolLM2-135M-Instruct)",
    )
    ask.add_argument(
        "--encoder",
        metavar="NAME_OR_PATH",
        default="default",
        help="query encoder q(x): a model name or local path; must match the one the knowledge base "
        "was indexed with (default: the offline all-MiniLM-L6-v2)",
    )
    ask.add_argument(
        "--max-new-tokens",
        type=positive_int,
        metavar="N",
        default=DEFAULT_MAX_NEW_TOKENS,
        help="longest answer, in generator tokens (default: %(default)s)",
    )
    ask.add_argument("--min-new-tokens", type=int, metavar="N", default=0,
                     help="shortest answer, in generator tokens (default: %(default)s)")
    ask.add_argument("--length-penalty", type=float, metavar="X", default=1.0,
                     help="beam score = log p / length**X, as in transformers (default: %(default)s)")
    ask.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="N",
        default=DEFAULT_BATCH_SIZE,
        help="questions answered together with --file (default: %(default)s)",
    )
    ask.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (with --file: JSON Lines, one object per question, in input order)",
    )
    ask.set_defaults(handler=_cmd_ask, subparser=ask)
    for name in COMMAND_MODULES:  # one small module per command group; each imports lazily
        importlib.import_module(name).register(commands)
    return parser


# --------------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code (0 ok, 2 bad input or usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, usage errors
        return _exit_code(stop.code)

    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return args.handler(args)
        except OpenbookError as error:
            _error(str(error))
            return 2
        except SystemExit as stop:  # a usage error found after parsing (argparse's error())
            return _exit_code(stop.code)
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return 130
        except BrokenPipeError:  # e.g. `openbook ask --file q.txt | head -1`: the reader has gone
            _silence_stdout()
            return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's final flush cannot fail on a closed pipe again."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 2


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error(message: str) -> None:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    stream = file if file is not None else sys.stderr
    try:
        print(f"{PROG}: warning: {_one_line(message)}", file=stream)
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------------------------------
# ask


def _cmd_ask(args: argparse.Namespace) -> int:
    if (args.question is None) == (args.file is None):
        args.subparser.error("give exactly one of QUESTION or --file")  # exits with status 2

    model_given, args.model = args.model, args.model or "rag-sequence"
    decoding = args.decoding or DEFAULT_DECODING
    if args.decoding is not None and args.model != "rag-sequence":
        warnings.warn(f"--decoding {args.decoding} applies to --model rag-sequence only; ignored for {args.model}")
        decoding = DEFAULT_DECODING

    # Read the questions before loading any model, so a wrong path fails in milliseconds.
    numbered = _read_questions(args.file) if args.file is not None else []

    if args.run is None:
        rag = _load_rag(model=args.model, kb=args.kb, generator=args.generator, encoder=args.encoder)
    else:
        rag = _load_rag(model=model_given, kb=args.kb, generator=args.generator, encoder=args.encoder,
                        run=args.run)
    options = dict(k=args.k, num_beams=args.beams, decoding=decoding, max_new_tokens=args.max_new_tokens)
    if args.min_new_tokens or args.length_penalty != 1.0:  # only pass what differs from the defaults
        options.update(min_new_tokens=args.min_new_tokens, length_penalty=args.length_penalty)

    if args.file is None:
        (answer,) = _ask(rag, [args.question], options, where=None)
        if args.json:
            print(json.dumps(answer_record(answer), ensure_ascii=False, indent=2))
        else:
            _print_answer(answer, sys.stdout)
        return 0

    first = True
    for batch in _batches(numbered, args.batch_size):
        lines = [n for n, _ in batch]
        where = f"{args.file}, line {lines[0]}" if len(lines) == 1 else f"{args.file}, lines {lines[0]}-{lines[-1]}"
        answers = _ask(rag, [q for _, q in batch], options, where=where)
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
    return 0


def _ask(rag: Any, questions: list[str], options: dict, where: str | None) -> list:
    try:
        answers = list(rag.ask(questions, **options))
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
    """The JSON form of an answer: ``question``, ``answer``, ``model``, ``passages``."""
    return {
        "question": str(answer.question),
        "answer": str(answer.answer),
        "model": str(answer.model),
        "passages": [
            {
                "id": _plain(p.id),
                "title": str(p.title),
                "text": str(p.text),
                "score": float(p.score),
                "prob": float(p.prob),
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
    flat = _one_line(text)
    if len(flat) <= width:
        return flat
    cut = flat[: width - 3]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "..."


def _print_answer(answer: Any, out: TextIO) -> None:
    print(answer.answer, file=out)
    passages = list(answer.passages)
    if not passages:
        return
    print(file=out)
    print(f"Top {len(passages)} passages ({answer.model}), with retriever probability p(z|x):", file=out)
    indent = " " * 13
    for rank, p in enumerate(passages, start=1):
        title = _one_line(p.title) or "(untitled)"
        print(f"{rank:>3}. {100.0 * float(p.prob):5.1f}%  {title}", file=out)
        print(f"{indent}{snippet(p.text)}", file=out)
