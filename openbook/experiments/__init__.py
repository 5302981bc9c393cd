"""The paper's experiments, one small module each (issue: reproduce Tables 1-6, Figures 2-3, section 4.5).

They need the ``experiments`` extra (``pip install 'openbook[experiments]'``): matplotlib for the plots and
pycountry for the hot swap's English country names. A plain install leaves them out (``openbook ask`` never
uses them); ``openbook experiments`` checks for them before it starts, as each report's plot comes last.
"""

from __future__ import annotations

import importlib.util

from openbook.errors import InputError

EXTRA_MODULES = ("matplotlib", "pycountry")  # the experiments extra of pyproject.toml


def missing_extra(module: str) -> InputError:
    """The one-line error for a module of the experiments extra that is not installed."""
    return InputError(f"openbook experiments need {module}, which is not installed: "
                      "pip install 'openbook[experiments]'")


def check_extra() -> None:
    """Raise :func:`missing_extra`'s error unless every module of the experiments extra is installed
    (found without importing it)."""
    for module in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a stand-in module without a spec, or a parent that fails to import
            found = False
        if not found:
            raise missing_extra(module)
