"""Fact verification: FEVER 3-way and 2-way (paper section 3.4).

"We map FEVER class labels (supports, refutes, or not enough info) to single output tokens and directly
train with claim-class pairs", without supervision on the retrieved evidence. The claim is the input;
the class is one target token: SUPPORTS -> ``true``, REFUTES -> ``false``, NOT ENOUGH INFO ->
``unknown`` -- each a single token for the default generator (SmolLM2, where "neither" would be two);
other words can be given (``FeverTask(labels=...)``), and a label that is not a single token of the
generator's tokenizer is a clear error at evaluation. Label accuracy is the
metric. ``fever3`` keeps all three classes; ``fever2`` (Thorne and Vlachos' supports/refutes task)
drops the NOT ENOUGH INFO claims while reading.

Format: the official FEVER JSON Lines ``{id, verifiable, label, claim, evidence: [[[annotation id,
evidence id, Wiki_Title, sentence], ...], ...]}`` (.gz ok); the evidence's Wikipedia titles are kept in
``meta["evidence_titles"]`` (for the paper's retrieval analysis, section 4.4:
:func:`openbook.eval.metrics.gold_title_overlap` compares them with the titles of the retrieved passages).
Also read: ``{input, target}`` or ``{claim, label}`` lines whose label is a class name or one of the target
tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError
from openbook.eval.tasks.base import ClassificationTask, Example, text

__all__ = ["FEVER_LABELS", "FeverTask"]

FEVER_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
DEFAULT_TARGETS = {"SUPPORTS": "true", "REFUTES": "false", "NOT ENOUGH INFO": "unknown"}


def _evidence_titles(evidence: Any) -> list[str]:
    """The distinct Wikipedia titles of FEVER's evidence sets, in order (NEI evidence has none)."""
    if evidence is None:
        return []
    if not isinstance(evidence, list):
        raise InputError("'evidence' must be a list of evidence sets")
    titles: list[str] = []
    for evidence_set in evidence:
        if not isinstance(evidence_set, list):
            raise InputError("each evidence set must be a list of [annotation, evidence, title, sentence]")
        for item in evidence_set:
            if not isinstance(item, list) or len(item) != 4:
                raise InputError(f"each evidence item must be [annotation, evidence, title, sentence], got {item!r}")
            title = item[2]
            if title is not None and not isinstance(title, str):
                raise InputError(f"an evidence title must be a string or null, got {title!r}")
            if title and title not in titles:
                titles.append(title)
    return titles


class FeverTask(ClassificationTask):
    """FEVER with 3 classes (``ways=3``) or supports/refutes only (``ways=2``)."""

    formats = "official FEVER JSON Lines {id, label, claim, evidence} (or {claim, label} / {input, target})"

    def __init__(self, ways: int = 3, labels: Sequence[str] | None = None):
        if ways not in (2, 3):
            raise InputError(f"FEVER is a 3-way or 2-way task, not {ways}-way")
        self.ways = ways
        self.name = f"fever{ways}"
        self.label_names = FEVER_LABELS[:ways]
        self.labels = tuple(DEFAULT_TARGETS[name] for name in self.label_names)
        self.description = (
            "FEVER fact verification, 3-way: supports / refutes / not enough info (label accuracy)" if ways == 3
            else "FEVER fact verification, 2-way: supports / refutes (label accuracy)"
        )
        super().__init__(labels)

    def label_name(self, value: Any) -> str:
        """A class name from a label as written in the data: a FEVER class or one of the target tokens."""
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"'label' must be one of {', '.join(FEVER_LABELS)}, got {value!r}")
        key = " ".join(value.replace("_", " ").split()).upper()
        if key in FEVER_LABELS:
            return key
        for name, target in zip(self.label_names, self.labels):
            if value.strip().casefold() == target.casefold():
                return name
        raise InputError(
            f"unknown label {value!r}; FEVER labels are {', '.join(FEVER_LABELS)} "
            f"(or this task's targets {', '.join(self.labels)})"
        )

    def parse_record(self, record: dict[str, Any]) -> Example | None:
        if "claim" in record:
            claim = text(record, "claim")
            name = self.label_name(record.get("label"))
        elif "input" in record:
            claim = text(record, "input")
            name = self.label_name(record.get("target"))
        else:
            raise InputError(f"no 'claim' (or 'input') field (the record's keys: {', '.join(sorted(record)) or 'none'})")
        if name not in self.label_names:  # NOT ENOUGH INFO in the 2-way task
            return None
        meta: dict[str, Any] = {}
        if "id" in record:
            meta["id"] = record["id"]
        titles = _evidence_titles(record.get("evidence"))
        if titles:
            meta["evidence_titles"] = titles
        return Example(claim, self.target_of(name), [name], meta)
