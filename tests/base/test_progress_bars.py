"""openbook.progress: bars on standard error that suit a log when it is not a terminal, and none above an error."""

from __future__ import annotations

import pytest

from openbook import progress
from openbook.progress import end_bars, progress_bar


def test_not_a_terminal_one_line_at_the_end(capsys):
    with progress_bar(total=4, desc="work", unit="item") as bar:
        for _ in range(4):
            bar.update()
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and "\r" not in err  # a line, not a redraw, and no empty first state
    assert lines[0].startswith("work: 100%|") and "4/4" in lines[0] and "item/s]" in lines[0]


def test_two_bars_not_on_a_terminal_write_plain_lines(capsys, monkeypatch):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)  # every update a line, as a long job's every 30 s
    with progress_bar(total=2, desc="reading files", unit="file") as files, \
            progress_bar(desc="encoding", unit="passage") as passages:
        for _ in range(2):
            files.update()
            passages.update(3)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    assert {line.split(":")[0] for line in err.splitlines()} == {"reading files", "encoding"}


def test_without_a_total_the_count_and_rate(capsys):
    for _ in progress_bar(iter(range(3)), desc="reading", unit="passage"):
        pass
    err = capsys.readouterr().err
    assert err.startswith("reading: 3passage [") and "passage/s]" in err


def test_a_failed_job_leaves_no_bar(capsys):
    with pytest.raises(ValueError), progress_bar(total=4, desc="work", unit="item") as bar:
        bar.update()
        raise ValueError("bad input")
    assert capsys.readouterr().err == ""


def test_end_bars_before_an_error_message(capsys):
    bar = progress_bar(total=4, desc="work", unit="item")
    bar.update()
    end_bars()
    bar.close()
    assert capsys.readouterr().err == ""


def test_disabled(capsys):
    with progress_bar(total=2, desc="work", unit="item", enabled=False) as bar:
        bar.update(2)
    assert capsys.readouterr().err == ""
