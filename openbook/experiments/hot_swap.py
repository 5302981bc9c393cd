"""Index hot-swapping (paper section 4.5): swap the knowledge base, and the model's world knowledge follows.

Two knowledge bases are written from Wikidata office holders as of 2016-12-31 and 2018-12-31, one short
passage per holder ("X is the head of state of Y."). For every office whose holder changed between the
two dates we ask "Who is the {role} of {country}?" once with each index and score the answer against the
holder of each era. The paper reports 70% / 68% for matched index and era and 12% / 4% mismatched.

An answer is correct when it contains the holder's full name (after lower-casing and removing
punctuation), because a generator may answer in a sentence.

The Wikidata table names countries in Portuguese ("Albânia"); questions and passages use the English
name of the country's ISO 3166 code (pycountry: "Albania"), as an English-speaking user would ask.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from openbook.corpus import Passage
from openbook.errors import InputError
from openbook.experiments import missing_extra
from openbook.presets import PAPER

ROLES = {"head_of_state": "head of state", "head_of_government": "head of government"}
ERAS = ("2016-12-31", "2018-12-31")


@dataclass(frozen=True)
class Office:
    iso3: str
    country: str
    role: str  # "head of state" / "head of government"


def english_name(iso3: str, fallback: str) -> str:
    """The common English name of an ISO 3166-1 alpha-3 code ("South Korea" for KOR), else ``fallback``."""
    try:
        import pycountry
    except ImportError:
        raise missing_extra("pycountry") from None

    country = pycountry.countries.get(alpha_3=iso3)
    return fallback if country is None else getattr(country, "common_name", None) or country.name


def holders_on(rows: list[dict], date: str) -> dict[Office, str]:
    """The single holder of each office on ``date`` (offices with zero or several holders are left out)."""
    found: dict[Office, set[str]] = {}
    for r in rows:
        role = ROLES.get(r.get("role", ""))
        start = (r.get("start") or "")[:10]
        if role is None or not start:
            continue
        end = (r.get("end") or "")[:10] or "9999-12-31"
        if start <= date < end:
            found.setdefault(Office(r["iso3"], english_name(r["iso3"], r["country"]), role), set()).add(r["person"])
    return {office: next(iter(people)) for office, people in found.items() if len(people) == 1}


def read_leaders(path: str | Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    missing = {"iso3", "country", "role", "person", "start", "end"} - set(rows[0] if rows else {})
    if missing:
        raise InputError(f"{path}: not a leaders table (missing columns {', '.join(sorted(missing))})")
    return rows


def passages_for(holders: dict[Office, str], era: str) -> list[Passage]:
    return [
        Passage(f"{era}:{o.iso3}:{o.role.replace(' ', '_')}", o.country, f"{person} is the {o.role} of {o.country}.")
        for o, person in sorted(holders.items(), key=lambda item: (item[0].iso3, item[0].role))
    ]


def changed_offices(old: dict[Office, str], new: dict[Office, str]) -> list[Office]:
    return sorted((o for o in old if o in new and old[o] != new[o]), key=lambda o: (o.iso3, o.role))


def question(office: Office) -> str:
    return f"Who is the {office.role} of {office.country}?"


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def names_person(answer: str, person: str) -> bool:
    """True if the answer contains the person's full name (case, accents and punctuation ignored)."""
    return f" {_norm(person)} " in f" {_norm(answer)} "


def score(answers: list[str], golds: list[str]) -> float:
    return sum(names_person(a, g) for a, g in zip(answers, golds)) / max(1, len(golds))


def run_hot_swap(rag, leaders_csv: str | Path, out_dir: str | Path, build_kb, limit: int | None = None,
                 batch_size: int = 8, **ask_options) -> dict:
    """Answer every changed-office question with the 2016 and the 2018 index (swapped in place).

    ``build_kb(passages, path)`` writes a knowledge base with the model's encoder. Returns the report:
    the four accuracies and every prediction.
    """
    rows = read_leaders(leaders_csv)
    old, new = (holders_on(rows, date) for date in ERAS)
    offices = changed_offices(old, new)[:limit]
    if not offices:
        raise InputError(f"{leaders_csv}: no office changed holder between {ERAS[0]} and {ERAS[1]}")
    questions = [question(o) for o in offices]
    answers = {}
    for era, holders in zip(("2016", "2018"), (old, new)):
        kb = build_kb(passages_for(holders, era), Path(out_dir) / f"kb-{era}")
        rag.use_knowledge_base(kb)
        answers[era] = [
            a.answer
            for start in range(0, len(questions), batch_size)
            for a in rag.ask(questions[start: start + batch_size], **{"abstain": PAPER.abstain, **ask_options})
        ]
    gold = {"2016": [old[o] for o in offices], "2018": [new[o] for o in offices]}
    accuracies = {
        f"index{index}_era{era}": score(answers[index], gold[era]) for index in ("2016", "2018") for era in ("2016", "2018")
    }
    predictions = [
        {"question": q, "gold_2016": g16, "gold_2018": g18, "answer_index2016": a16, "answer_index2018": a18}
        for q, g16, g18, a16, a18 in zip(questions, gold["2016"], gold["2018"], answers["2016"], answers["2018"])
    ]
    return {"offices": len(offices), "accuracy": accuracies, "predictions": predictions}
