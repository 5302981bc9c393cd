"""bench/fresh_demo.py on a stand-in repository whose `make demo` only prints (the real one installs for minutes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_scripts import bench_modules

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench():
    with bench_modules("fresh_demo") as module:
        yield module


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "Makefile").write_text("demo:\n\t@echo before\n")
    git(repo, "add", "Makefile")
    git(repo, "commit", "-qm", "before")
    git(repo, "tag", "v-before")
    (repo / "Makefile").write_text("demo:\n\t@echo after\n")
    git(repo, "commit", "-qam", "after")
    return repo


def test_times_both_refs_in_fresh_clones_and_ends_with_json(bench, repo, tmp_path, capsys):
    log = tmp_path / "make.log"
    figures = bench.main(["--repo", str(repo), "--before", "v-before", "--runs", "2", "--log", str(log)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == figures
    assert figures["runs"] == 2 and figures["after_median_s"] >= 0 and figures["ratio_median"] > 0
    # each ref's own Makefile ran, twice: the clones were checked out at the right commits
    assert sorted(log.read_text().split()) == ["after", "after", "before", "before"]


def test_a_failing_demo_stops_with_one_line(bench, repo):
    (repo / "Makefile").write_text("demo:\n\t@exit 3\n")
    git(repo, "commit", "-qam", "broken")
    with pytest.raises(SystemExit, match="make demo at HEAD exited 2"):
        bench.main(["--repo", str(repo), "--runs", "1"])


def test_each_run_starts_with_an_empty_openbook_cache(bench, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBOOK_CACHE", str(tmp_path / "shared-cache"))
    (repo / "Makefile").write_text("demo:\n\t@ls -A $$OPENBOOK_CACHE 2>/dev/null | wc -l; mkdir -p $$OPENBOOK_CACHE/x\n")
    git(repo, "commit", "-qam", "cache")
    log = tmp_path / "make.log"
    bench.main(["--repo", str(repo), "--runs", "2", "--log", str(log)])
    assert log.read_text().split() == ["0", "0"]  # the second run did not see the first one's cache


def test_the_venv_is_counted_before_the_clone_goes(bench, repo, tmp_path):
    (repo / "Makefile").write_text("demo:\n\t@mkdir -p .venv/lib/python3.11/site-packages/a-1.dist-info\n"
                                   "\t@head -c 3145728 /dev/zero > .venv/lib/python3.11/site-packages/big\n")
    git(repo, "commit", "-qam", "venv")
    figures = bench.main(["--repo", str(repo), "--runs", "1"])
    assert figures["after_distributions"] == 1 and figures["after_venv_mb"] == 3
