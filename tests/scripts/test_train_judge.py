"""scripts/train_judge.py: each set's yes and no pairs weigh the same, so the judge cannot learn a set's style."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def test_each_sets_yes_and_no_pairs_weigh_the_same():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        patch.syspath_prepend(str(SCRIPTS.parent / "bench"))
        sys.modules.pop("train_judge", None)
        from train_judge import balance
    pairs = [{"source": "nq", "y": 1}] * 3 + [{"source": "nq", "y": 0}] + [{"source": "wq", "y": 1}] + \
        [{"source": "wq", "y": 0}] * 9
    weight = balance(pairs)
    for source in ("nq", "wq"):
        yes = sum(weight[(p["source"], p["y"])] for p in pairs if p["source"] == source and p["y"])
        no = sum(weight[(p["source"], p["y"])] for p in pairs if p["source"] == source and not p["y"])
        assert yes == pytest.approx(no)
    assert sum(weight[(p["source"], p["y"])] for p in pairs) == pytest.approx(len(pairs))
