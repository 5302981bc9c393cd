"""The ``openbook`` command line: the entry point only.

Each command group lives in its own module under :mod:`openbook.commands` (``ask``, ``retrieve``,
``kb``, ``eval``, ``train``, ``experiments``); this module builds the parser from them, runs the chosen
handler and turns openbook's errors and warnings into one-line messages. Nothing heavy is imported at
module level: ``openbook --help`` must not pay for torch or transformers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from openbook import __version__
from openbook.errors import OpenbookError, check_text, one_line

PROG = "openbook"

# One module per command group: each has `register(subparsers)` and sets `handler` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "openbook.commands.ask",
    "openbook.commands.eval",
    "openbook.commands.kb",
    "openbook.commands.retrieve",
    "openbook.commands.train",
    "openbook.commands.experiments",
    "openbook.commands.export",
    "openbook.commands.serve",
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
        _check_arguments(parser, args)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # to start the same command in more processes
    except SystemExit as stop:  # --help, --version, usage errors
        return _exit_code(stop.code)
    except OpenbookError as error:
        _error(str(error))
        return 2

    # With torchao installed (``kb build --compile``), transformers and peft import it: it logs that its CUDA
    # kernels cannot load on a CPU-only torch, and torch that torchao calls a deprecated registration. Neither
    # matters to a command; their errors still print.
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
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
            _end_bars()
            print(file=sys.stderr)
            return 130
        except BrokenPipeError:  # e.g. `openbook ask --file q.txt | head -1`: the reader has gone
            _silence_stdout()
            return 0


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, where arguments enter, text a tokenizer cannot take: an argument that is not valid UTF-8
    (Python hands it over as lone surrogates) or holds a NUL. InputError naming the argument."""
    names = _argument_names(parser, args)
    for dest, value in vars(args).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (str, os.PathLike)):
                check_text(os.fspath(item), f"argument {names.get(dest, dest)}")


def _argument_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """``{dest: how the command line spells it}`` (``--text``, ``QUESTION``) for the chosen (sub)command."""
    names: dict[str, str] = {}
    while parser is not None:
        chosen = None
        for action in parser._actions:  # argparse keeps no public list of a parser's arguments
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None))
            elif action.option_strings:
                names[action.dest] = max(action.option_strings, key=len)
            else:
                names[action.dest] = action.metavar if isinstance(action.metavar, str) else action.dest
        parser = chosen
    return names


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


def _error(message: str) -> None:
    _end_bars()
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)


def _end_bars() -> None:
    """No half-done progress bar above an error (there are bars only if tqdm was imported)."""
    if "tqdm" in sys.modules:
        from openbook.progress import end_bars

        end_bars()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    stream = file if file is not None else sys.stderr
    try:
        with _above_bars(stream):
            print(f"{PROG}: warning: {one_line(message)}", file=stream)
    except (OSError, ValueError):
        pass


def _above_bars(stream):
    """Where a warning is written: above the progress bars drawn on ``stream``, if any."""
    if "tqdm" not in sys.modules:
        return contextlib.nullcontext()
    from openbook.progress import above_bars

    return above_bars(stream)
