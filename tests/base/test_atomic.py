"""openbook/atomic.py: a folder is replaced whole or not at all."""

from __future__ import annotations

import pytest

from openbook.atomic import atomic_dir


def test_atomic_dir_replaces_the_folder_only_when_the_body_succeeds(tmp_path):
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # no temporary folder left
    assert (target / "old.txt").read_text() == "old" and not (target / "new.txt").exists()
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("whole")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]
    assert [p.name for p in target.iterdir()] == ["new.txt"] and (target / "new.txt").read_text() == "whole"
