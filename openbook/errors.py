"""Errors openbook raises for bad input.

Every error names the input that is wrong and what is wrong with it, so that the command line can print
it as one line instead of a traceback from deep inside a library.
"""

import numbers

#: The largest k (passages retrieved per question) openbook accepts anywhere: the paper's test-time sweep goes
#: to 50 documents and DPR reports recall@100. A larger k costs memory and time (RAG-Sequence Thorough
#: decoding scores k * beams hypotheses under each of the k passages) without being a setting anyone evaluates.
MAX_K = 100


class OpenbookError(Exception):
    """Base class: a problem with what the user gave us (not a bug in openbook)."""


class InputError(OpenbookError, ValueError):
    """A question, file or option that cannot be used as given."""


class ModelLoadError(OpenbookError):
    """A model that cannot be loaded (for example a hub name while offline)."""


class KnowledgeBaseError(OpenbookError):
    """A knowledge-base directory that is missing, incomplete, or built with another encoder."""


def positive_int(value, name: str) -> int:
    """``value`` as an int if it is a whole number of at least 1 (numpy integers included, bools not);
    otherwise :class:`InputError` naming ``name``. The one library-level check of counts and sizes (the
    command line's argparse type is :func:`openbook.commands.positive_int`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_k(k) -> int:
    """``k`` as an int if it is a whole number from 1 to :data:`MAX_K` (numpy integers included, bools not);
    otherwise :class:`InputError`. The one check of ``k``, made where it enters: the command line's ``--k``
    (:func:`openbook.commands.k_arg`), the API's request models, and Python's ``RAG(k=)``, ``RAG.retrieve``
    (so ``ask``, ``loss`` ...) and ``evaluate``. Below them ``k`` is only clamped to the passages there are."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= MAX_K:
        raise InputError(f"k (passages per question) must be a whole number from 1 to {MAX_K}, got {k!r}")
    return int(k)


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` with every run of whitespace (newlines included) as one space, so that a message prints on
    one line; cut to ``limit`` characters (ending in "…") if given."""
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def check_text(value: str, name: str) -> str:
    """``value`` unchanged if a tokenizer can take it: text that encodes as UTF-8 (no lone surrogates,
    which a command-line argument that is not valid UTF-8 decodes to, or a JSON ``"\\udfff"`` escape) and
    holds no NUL character; otherwise :class:`InputError` naming ``name`` and the first bad position.
    Checked where text enters (the command line, the API's request models, ``RAG.ask``), so that one bad
    question fails alone instead of the batch it would have joined."""
    for i, ch in enumerate(value):
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            raise InputError(f"{name} is not valid text: a lone surrogate U+{code:04X} at character {i + 1} "
                             "(not valid UTF-8)")
        if code == 0:
            raise InputError(f"{name} is not valid text: a NUL character at character {i + 1}")
    return value
