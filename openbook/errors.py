"""Errors openbook raises for bad input.

Every error names the input that is wrong and what is wrong with it, so that the command line can print
it as one line instead of a traceback from deep inside a library.
"""


class OpenbookError(Exception):
    """Base class: a problem with what the user gave us (not a bug in openbook)."""


class InputError(OpenbookError, ValueError):
    """A question, file or option that cannot be used as given."""


class ModelLoadError(OpenbookError):
    """A model that cannot be loaded (for example a hub name while offline)."""


class KnowledgeBaseError(OpenbookError):
    """A knowledge-base directory that is missing, incomplete, or built with another encoder."""
