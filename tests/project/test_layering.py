"""The package's layers flow one way and its modules import each other without circles.

Layers, lowest first: the shared base (``errors``, ``atomic``, ``data``, ``presets``), ``corpus``, ``index``,
``models``, ``rag``, then ``train``/``eval`` and ``experiments``, then ``commands`` and the entry point
(``cli``, ``__main__``). Every import between openbook modules is read with :mod:`ast` -- those at module
level and those inside functions (the lazy ones) -- and none may reach a higher layer. Among all of them,
lazy ones included, there must be no cycle. Finally every module imports in a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "openbook"

# Rank of each top-level part of the package; a module may import only modules of its rank or below.
LAYERS = {
    "openbook": 0, "openbook.errors": 0, "openbook.atomic": 0, "openbook.data": 0, "openbook.presets": 0,
    "openbook.progress": 0,
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


def test_no_import_cycles():
    """No cycle among openbook's imports, those inside functions included: a lazy import only delays a
    circle, it does not break it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        path.append(module)
        top, lazy = GRAPH[module]
        for target in sorted(top | lazy):
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
    """The loader (assemble) imports the model and the closed-book baseline; they never import it, not even
    inside a function (``RAG.load`` is handed the loader by ``openbook.rag``), nor each other: what both
    answer with and check (``Answer``, the question and decoding checks) lives in ``openbook.rag.answer``."""
    assert {"openbook.rag.model", "openbook.rag.closed_book"} <= GRAPH["openbook.rag.assemble"][0]
    for module in ("openbook.rag.model", "openbook.rag.closed_book"):
        top, lazy = GRAPH[module]
        assert "openbook.rag.assemble" not in top | lazy, module
        assert "openbook.rag.answer" in top, module
    assert "openbook.rag.model" not in set().union(*GRAPH["openbook.rag.closed_book"])


def test_the_cycle_check_finds_a_cycle_through_a_lazy_import(monkeypatch):
    top, lazy = GRAPH["openbook.rag.model"]
    monkeypatch.setitem(GRAPH, "openbook.rag.model", (top, lazy | {"openbook.rag.assemble"}))
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_import_cycles()


def test_rag_load_builds_with_the_one_loader():
    """``RAG.load`` delegates to :func:`openbook.rag.assemble.load_model`, handed in by ``openbook.rag``."""
    from openbook.rag import RAG, assemble, load_model

    assert RAG.loader is assemble.load_model is load_model


def test_exactly_one_public_load_model():
    """One public model loader, :func:`openbook.rag.assemble.load_model` (``RAG.load`` and
    ``openbook.rag.load_model`` are it); the command line's and the experiments' helpers are named for what they
    do (``model_from_args``, ``model_of_run``)."""
    defined = [module for module, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "load_model"]
    assert defined == ["openbook.rag.assemble"], defined


def _is_k(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "k") or (isinstance(node, ast.Attribute) and node.attr == "k")


def _is_bound(node: ast.AST) -> bool:
    named = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))) or named.endswith("MAX_K")


def k_bound_checks(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that check k against a bound of their own: ``k`` ordered against a number or a MAX_K,
    a ``MAX_K`` defined, or a field ``k`` with pydantic's ``ge``/``le`` bounds."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(map(_is_k, operands)) and any(map(_is_bound, operands)):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {target.id for target in targets if isinstance(target, ast.Name)}
            if "MAX_K" in names:
                lines.append(node.lineno)
            if "k" in names and isinstance(node.value, ast.Call) and {
                    keyword.arg for keyword in node.value.keywords} & {"ge", "gt", "le", "lt"}:
                lines.append(node.lineno)
    return sorted(lines)


def test_k_is_checked_by_one_function():
    """``openbook.errors.check_k`` is the one check of k (against 1 and :data:`~openbook.errors.MAX_K`); no
    other module compares k with a bound of its own (clamping k to the passages there are is not a check)."""
    found = {module: k_bound_checks(ast.parse(path.read_text(encoding="utf-8"))) for module, path in MODULES.items()}
    assert found.pop("openbook.errors"), "openbook.errors.check_k no longer checks k"
    assert {module: lines for module, lines in found.items() if lines} == {}
    probe = "if k > 100 or k == 0:\n    pass\nMAX_K = 3\nk: int = Field(1, le=3)\nif 1 <= self.k:\n    pass\n"
    assert k_bound_checks(ast.parse(probe)) == [1, 3, 4, 5]


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
