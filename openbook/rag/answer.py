"""What ``ask`` answers and the checks of what it is asked: the :class:`Answer` (with its
:class:`RetrievedPassage` provenance), the questions (:func:`check_questions`) and the decoding options
(:func:`check_decoding_options`), shared by the RAG model (:mod:`openbook.rag.model`) and the closed-book
baseline (:mod:`openbook.rag.closed_book`), which import this module and not each other.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from openbook.errors import InputError, positive_int
from openbook.presets import DECODINGS
from openbook.rag.abstain import abstain_score, abstains

# Bounds on the work one call may ask for (a user's typo must not take hours or all memory): beams as
# wide as anyone decodes with (the paper used 4; transformers' examples go to 10-50), and answers of
# at most this many tokens (every openbook generator's context budget is smaller than this).
MAX_BEAMS = 64
MAX_NEW_TOKENS = 1024


@dataclass
class RetrievedPassage:
    id: str
    title: str
    text: str
    score: float  # d(z)^T q(x)
    prob: float  # p_eta(z|x) over the top k
    posterior: float | None = None  # p(z|x,y) given the generated answer
    meta: dict = field(default_factory=dict)  # the passage's metadata (Passage.meta; {} when it has none)
    judge: float | None = None  # the passage judge's logit that it holds the answer (openbook.models.judge)


@dataclass
class Answer:
    question: str
    answer: str
    model: str
    passages: list[RetrievedPassage]
    tokens: list[str] = field(default_factory=list)  # the answer's tokens, as generated (the tokenizer's pieces)
    token_texts: list[str] = field(default_factory=list)  # the text each token adds to the answer (for people)
    alternatives: list[str] = field(default_factory=list)  # the next-best hypotheses (n-best), best first
    token_posteriors: list[list[float]] | None = None  # RAG-Token: p(z_t|x,y_<=t) per token, per passage
    truncated: bool = False  # decoding hit max_new_tokens (no EOS): the text was cut back to a whole word/sentence
    logprob: float | None = None  # log p(y|x) per answer token (RAG marginal over the passages read)
    abstained: bool = False  # the knowledge base does not seem to hold the answer (openbook.rag.abstain)
    abstain_score: float | None = None  # the score that decided it ...
    abstain_threshold: float | None = None  # ... against this threshold (None: no calibrated threshold)

    def decide_abstention(self, threshold: float | None) -> None:
        """Score this answer for abstention and abstain if the score is below ``threshold`` (None: never)."""
        passages = [(p.score, p.prob, p.title, p.text, p.judge) for p in self.passages]
        self.abstain_score = abstain_score(self.question, self.answer, passages, self.logprob)
        self.abstain_threshold = threshold
        self.abstained = abstains(self.abstain_score, threshold)

    def to_dict(self, full: bool = False) -> dict:
        out = {
            "question": self.question,
            "answer": self.answer,
            "model": self.model,
            "truncated": self.truncated,
            **self.abstention(),
            "passages": [
                {k: v for k, v in asdict(p).items() if full or k != "posterior"} for p in self.passages
            ],
        }
        if full:
            out["tokens"], out["token_texts"] = self.tokens, self.token_texts
            out["token_posteriors"] = self.token_posteriors
        return out

    def abstention(self) -> dict:
        """``abstained``, ``abstain_score`` and ``abstain_threshold`` (None: no calibrated threshold), as JSON gives
        them; nothing for an answer never scored (a closed-book model has no passages to judge by)."""
        if self.abstain_score is None:
            return {}
        return {"abstained": self.abstained, "abstain_score": self.abstain_score,
                "abstain_threshold": self.abstain_threshold}


def check_questions(questions: Sequence[str]) -> list[str]:
    """Questions must be non-empty strings; the error names the first bad one by position."""
    if isinstance(questions, str):
        questions = [questions]
    questions = list(questions)
    if not questions:
        raise InputError("no question given")
    for i, q in enumerate(questions, 1):
        if not isinstance(q, str):
            raise InputError(f"question {i} is not text but {type(q).__name__}")
        if not q.strip():
            raise InputError(f"question {i} is empty" + (" (only whitespace)" if q else ""))
    return [q.strip() for q in questions]


def check_decoding_options(decoding: str, num_beams: int, max_new_tokens: int, min_new_tokens: int,
                           length_penalty: float, n_best: int) -> None:
    """The decoding options of ``ask`` (RAG and closed-book), refused with one clear error each."""
    if decoding not in DECODINGS:
        raise InputError(f"decoding must be one of {', '.join(DECODINGS)}, not {decoding!r}")
    if positive_int(num_beams, "num_beams") > MAX_BEAMS:
        raise InputError(f"num_beams must be at most {MAX_BEAMS}, got {num_beams}")
    if positive_int(max_new_tokens, "max_new_tokens") > MAX_NEW_TOKENS:
        raise InputError(f"max_new_tokens must be at most {MAX_NEW_TOKENS}, got {max_new_tokens}")
    if min_new_tokens != 0:
        positive_int(min_new_tokens, "min_new_tokens")
    if min_new_tokens > max_new_tokens:
        raise InputError(f"min_new_tokens ({min_new_tokens}) must not exceed max_new_tokens ({max_new_tokens})")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, numbers.Real) or not math.isfinite(
            length_penalty):  # numpy floats are numbers too, as numpy integers are for positive_int
        raise InputError(f"length_penalty must be a finite number, got {length_penalty!r}")
    if not 1 <= positive_int(n_best, "n_best") <= num_beams:
        raise InputError(f"n_best must be between 1 and the number of beams ({num_beams}), got {n_best}")
