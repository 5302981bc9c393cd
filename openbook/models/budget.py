"""How much of a generator's input a question may take, and cutting text at token boundaries.

A generator sees one context per (question, passage) of at most ``max_context_length`` tokens. A question
may fill at most :data:`QUESTION_SHARE` of it: a longer one is cut, with one warning per call, so every
context keeps room for the template and at least part of the passage, and the work per question stays
bounded (a 20,000-word question used to reach the generator whole). Retrieval cuts questions the same
way, to its encoder's limit (:meth:`openbook.models.encoders.Encoder.encode_queries`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

#: The largest share of a generator's ``max_context_length`` that a question may take.
QUESTION_SHARE = 0.5


def cut_points(tokenizer, text: str, limit: int | None = None) -> list[int]:
    """Character offsets at which ``text`` can be cut after 1, 2, ... of its tokens (at most ``limit``)."""
    kwargs = {"truncation": True, "max_length": limit} if limit is not None else {}
    try:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, **kwargs)["offset_mapping"]
        return [end for _, end in offsets]
    except (NotImplementedError, TypeError, KeyError):
        ids = tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"]
        return [len(tokenizer.decode(ids[: i + 1])) for i in range(len(ids))]  # approximate for slow tokenizers


def question_budget(max_context_length: int) -> int:
    """The most tokens a question may take in a context of ``max_context_length`` tokens."""
    return max(1, int(max_context_length * QUESTION_SHARE))


def fit_questions(tokenizer, questions: Sequence[str], max_context_length: int) -> list[str]:
    """``questions``, each cut to :func:`question_budget` tokens of ``tokenizer``; warns once if any was cut."""
    budget = question_budget(max_context_length)
    fitted, cut = [], []
    for question in questions:
        cuts = cut_points(tokenizer, question, limit=budget + 1)
        if len(cuts) > budget:
            cut.append(question)
            question = question[: cuts[budget - 1]]
        fitted.append(question)
    if cut:
        example = cut[0] if len(cut[0]) <= 60 else cut[0][:57] + "..."
        warnings.warn(
            f"{len(cut)} question(s) longer than the generator's {budget}-token question budget (a share of "
            f"{QUESTION_SHARE:g} of its {max_context_length}-token context) were cut, e.g. {example!r}",
            stacklevel=3,
        )
    return fitted
