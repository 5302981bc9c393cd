"""The package's layers flow one way and its modules import each other without circles.

Layers, lowest first: the shared base (``errors``, ``atomic``, ``data``, ``presets``), ``corpus``, ``index``,
``models``, ``rag``, then ``train``/``eval`` and ``experiments``, then ``commands`` and the entry point
(``cli``, ``__main__``). Every import between openbook modules is read with :mod:`ast` -- those at module
level and those inside functions (the lazy ones) -- and none may reach a higher layer. Among module-level
imports there must be no cycle (a lazy import inside a function, like ``RAG.load``'s of the loader above
it in the same layer, is allowed). Finally every module imports in a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "openbook"

# Rank of each top-level part of the package; a module may import only modules of its rank or below.
LAYERS = {
    "openbook": 0, "openbook.errors": 0, "openbook.atomic": 0, "openbook.data": 0, "openbook.presets": 0,
    "openbook.corpus": 1,
    "openbook.index": 2,
    "openbook.models": 3,
    "openbook.rag": 4,
    "openbook.train": 5, "openbook.eval": 5,
    "openbook.experiments": 6,
    "openbook.commands": 7, "openbook.serve": 7,
    "openbook.cli": 8, "openbook.__main__": 8,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    parts = module.split(".")
    for end in range(min(len(parts), 2), 0, -1):
        name = ".".join(parts[:end])
        if name in LAYERS:
            return LAYERS[name]
    raise AssertionError(f"{module} belongs to no layer: add its top-level part to LAYERS")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, node: ast.AST) -> list[str]:
    """The openbook modules an import statement loads (``from pkg import submodule`` names the submodule)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        source = _resolve(module, node)
        names = [source] + [f"{source}.{alias.name}" for alias in node.names]
    return [name for name in names if name in MODULES]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str) -> tuple[set[str], set[str]]:
    """``(module-level imports, imports inside functions)`` of ``module``, as openbook module names."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    top: set[str] = set()
    lazy: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue  # annotations only: never executed
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (lazy if in_function else top).update(_targets(module, child))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inner)

    visit(tree, False)
    top.discard(module)
    lazy.discard(module)
    return top, lazy


GRAPH = {module: imports(module) for module in MODULES}


def test_the_layer_map_covers_every_module():
    for module in MODULES:
        layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    top, lazy = GRAPH[module]
    upward = sorted(target for target in top | lazy if layer(target) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports higher layers: {upward}"


def test_commands_never_import_the_entry_point():
    for module, (top, lazy) in GRAPH.items():
        if module.startswith("openbook.commands"):
            assert "openbook.cli" not in top | lazy, module


def test_no_import_cycles_at_module_level():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module][0]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                walk(target)
        path.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            walk(module)


def test_the_model_modules_form_a_plain_layering():
    """The loader (assemble) imports the model and the closed-book baseline; they never import it at
    module level (``RAG.load`` imports it lazily, inside the classmethod)."""
    assert {"openbook.rag.model", "openbook.rag.closed_book"} <= GRAPH["openbook.rag.assemble"][0]
    for module in ("openbook.rag.model", "openbook.rag.closed_book"):
        assert "openbook.rag.assemble" not in GRAPH[module][0], module
    assert "openbook.rag.assemble" not in GRAPH["openbook.rag.closed_book"][1]


def test_the_cycle_check_finds_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "openbook.rag.model", (GRAPH["openbook.rag.model"][0] | {"openbook.rag.assemble"},
                                                      set()))
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_import_cycles_at_module_level()


def test_every_module_imports_in_a_fresh_interpreter():
    modules = sorted(name for name in MODULES if name != "openbook.__main__")
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True, env=env, cwd=REPO,
                            timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
