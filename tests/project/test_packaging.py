"""The package declares what it imports and ships its type hints.

Every third-party module imported anywhere under openbook/ must be a declared dependency (an import
guarded by ``except ImportError`` may instead be an optional extra): ``regex`` and ``huggingface_hub``
were imported but undeclared, so a fresh install could fail at the first question.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "openbook"
# import name -> distribution name, for modules that need not be installed here (optional extras)
KNOWN_DISTRIBUTIONS = {"Stemmer": "PyStemmer"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def _guarded(node: ast.AST, parents: dict) -> bool:
    """Whether ``node`` sits in a ``try`` whose handlers catch ImportError (an optional import)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names = ast.unparse(handler.type) if handler.type is not None else "ImportError"
                if "ImportError" in names or "ModuleNotFoundError" in names:
                    return True
    return False


def third_party_imports() -> dict[str, tuple[str, bool]]:
    """Top-level third-party module -> (a file importing it, whether every import of it is guarded)."""
    found: dict[str, tuple[str, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "openbook" or top in sys.stdlib_module_names or top == "__future__":
                    continue
                _, guarded = found.get(top, ("", True))
                found[top] = (str(path.relative_to(ROOT)), guarded and _guarded(node, parents))
    return found


def distribution_of(module: str) -> str:
    if module in KNOWN_DISTRIBUTIONS:
        return _canonical(KNOWN_DISTRIBUTIONS[module])
    distributions = packages_distributions().get(module)
    assert distributions, f"which distribution provides the module {module!r}? add it to KNOWN_DISTRIBUTIONS"
    return _canonical(distributions[0])


def test_every_imported_third_party_module_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = {_requirement_name(r) for r in project["dependencies"]}
    optional = {_requirement_name(r) for extra in project.get("optional-dependencies", {}).values() for r in extra}
    imports = third_party_imports()
    assert {"torch", "transformers", "regex", "huggingface_hub"} <= set(imports)  # the walk sees the package
    missing = []
    for module, (where, guarded) in sorted(imports.items()):
        distribution = distribution_of(module)
        if distribution not in required and not (guarded and distribution in optional):
            missing.append(f"{module} (distribution {distribution}, imported in {where})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_the_package_ships_its_type_hints_and_ruff():
    assert (PACKAGE / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["openbook"]
    assert "ruff" in {_requirement_name(r) for r in config["project"]["optional-dependencies"]["dev"]}
