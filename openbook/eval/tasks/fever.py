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
``meta["evidence_titles"]`` (for the paper's retrieval analysis, section 4.4: :func:`gold_title_overlap`
compares them, through :func:`normalise_title`, with the titles of the retrieved passages). Also read: ``{input,
target}`` or ``{claim, label}`` lines whose label is a class name or one of the target tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openbook.errors import InputError
from openbook.eval.tasks.base import ClassificationTask, Example, text

__all__ = ["FEVER_LABELS", "FeverTask", "gold_title_overlap", "normalise_title"]

FEVER_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
DEFAULT_TARGETS = {"SUPPORTS": "true", "REFUTES": "false", "NOT ENOUGH INFO": "unknown"}


# The FEVER Wikipedia dump writes brackets and colons of page titles as PTB tokens.
_TITLE_TOKENS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
                 "-COLON-": ":"}


def normalise_title(title: str) -> str:
    """A Wikipedia title as FEVER or a knowledge base writes it, in one comparable form:
    ``"Savages_-LRB-2012_film-RRB-"`` and ``"Savages (2012 film)"`` -> ``"savages (2012 film)"`` (PTB
    bracket and colon tokens back to characters, underscores to spaces, Unicode NFC, whitespace collapsed,
    case folded)."""
    import unicodedata

    for token, char in _TITLE_TOKENS.items():
        title = title.replace(token, char)
    return " ".join(unicodedata.normalize("NFC", title).replace("_", " ").split()).casefold()


def gold_title_overlap(retrieved: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], k: int,
                       kb_titles: set[str] | None = None) -> dict[str, float | int | None]:
    """How often retrieval finds a gold evidence article (paper 4.4: the top passage is from a gold article
    in 71% of claims, one of the top 10 in 90%).

    ``retrieved[i]``: the titles of claim i's passages, best first; ``gold[i]``: its evidence titles (claims
    without any, NOT ENOUGH INFO, are left out); titles are compared by :func:`normalise_title`. Returns
    ``claims`` (verifiable ones), ``top1`` and ``top{k}`` (fractions of them whose top 1 / top k passages
    include a gold article); with ``kb_titles`` (the knowledge base's titles) also ``in_kb`` (the fraction
    whose gold article is in the knowledge base at all), ``claims_in_kb`` and ``top1_in_kb`` /
    ``top{k}_in_kb`` (the same fractions among those claims). A fraction of no claims is None (JSON null)."""
    if len(retrieved) != len(gold):
        raise ValueError(f"{len(retrieved)} retrievals for {len(gold)} claims")
    known = None if kb_titles is None else {normalise_title(t) for t in kb_titles}
    top1, topk, inside = [], [], []
    for titles, golds in zip(retrieved, gold):
        wanted = {normalise_title(t) for t in golds}
        if not wanted:
            continue
        found = [normalise_title(t) in wanted for t in titles[:k]]
        top1.append(bool(found[:1] and found[0]))
        topk.append(any(found))
        inside.append(known is not None and bool(wanted & known))

    def mean(flags: list[bool]) -> float | None:
        return sum(flags) / len(flags) if flags else None

    out: dict[str, float | int | None] = {"claims": len(top1), "top1": mean(top1), f"top{k}": mean(topk)}
    if known is not None:
        out.update({"in_kb": mean(inside), "claims_in_kb": sum(inside),
                    "top1_in_kb": mean([f for f, i in zip(top1, inside) if i]),
                    f"top{k}_in_kb": mean([f for f, i in zip(topk, inside) if i])})
    return out


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
