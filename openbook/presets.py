"""The one home of openbook's choices and of its two sets of decoding defaults.

The choice lists (model kinds, retrievers, decodings, number types, devices ...) that the library checks, the
command line offers (``choices=``) and the HTTP API declares (``Literal``) are written here once. The two
presets say how an entry point decodes when it is not told otherwise:

* :data:`INTERACTIVE`: quick short answers. ``RAG.ask``, ``openbook ask``, ``POST /v1/ask`` and the web page.
* :data:`PAPER`: the paper's decoding (4 beams, Thorough) in float32, with the task's answer length.
  ``openbook eval``, :func:`openbook.eval.evaluate.evaluate` and ``openbook experiments``.

This module imports nothing of openbook's and nothing heavy, so the command line's parser and the server's
settings can read it without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

MODELS = ("rag-sequence", "rag-token")  # how documents are marginalised (paper eqs. 1 and 2)
MODELS_WITH_CLOSED_BOOK = (*MODELS, "closed-book")  # and the generator alone, the paper's baseline
RETRIEVERS = ("dense", "bm25", "hybrid")  # MIPS with q(x), BM25 (Table 6), reciprocal rank fusion of both
DECODINGS = ("thorough", "fast", "lazy")  # RAG-Sequence decoding (paper section 2.5; lazy: fast's answer)
DTYPES = ("auto", "float32", "bfloat16", "int8")  # the generator's number type; auto: bfloat16 where native
DEVICES = ("auto", "cpu", "cuda")  # where the models run; auto: cuda when there is a GPU
EMBEDDING_DTYPES = ("float32", "float16")  # how a knowledge base stores its document vectors
ON_ERROR = ("stop", "skip")  # what reading a corpus does with a bad record
AUTO_INDEX = "auto"  # a knowledge base's default index: the kind chosen by its number of vectors when it is indexed


@dataclass(frozen=True)
class Preset:
    """How to decode when not told otherwise: beam size (1 is greedy search), RAG-Sequence decoding, the
    longest answer in generator tokens (None: the task's own length), the generator's number type, and whether
    to abstain when the knowledge base does not seem to hold the answer (:mod:`openbook.rag.abstain`)."""

    name: str
    num_beams: int
    decoding: str
    max_new_tokens: int | None
    dtype: str
    abstain: bool

    def flags(self) -> str:
        """The command-line flags that select this preset (the answer length only where it is a number)."""
        flags = f"--beams {self.num_beams} --decoding {self.decoding}"
        if self.max_new_tokens is not None:
            flags += f" --max-new-tokens {self.max_new_tokens}"
        return flags + f" --dtype {self.dtype}" + ("" if self.abstain else " --no-abstain")


# Greedy, Lazy decoding (Fast decoding's answer, reading passages only until it is settled), 16 new tokens,
# bfloat16 where the CPU computes it natively: short answers in interactive time; abstaining when the book has
# no answer (with the model's calibrated threshold).
INTERACTIVE = Preset("interactive", num_beams=1, decoding="lazy", max_new_tokens=16, dtype="auto", abstain=True)
# The paper's decoding: 4 beams, Thorough decoding, the task's answer length, float32; every question answered.
PAPER = Preset("paper", num_beams=4, decoding="thorough", max_new_tokens=None, dtype="float32", abstain=False)
PRESETS = {preset.name: preset for preset in (INTERACTIVE, PAPER)}

# What `ask` abstains on (openbook.rag.abstain): "top_score", the top passage's retrieval score d(z)^T q(x);
# "logprob", the answer's log p(y|x) per token; or "combined", the sum of ABSTAIN_WEIGHTS times the features of
# openbook.rag.abstain.abstain_features. Chosen, weighted, and its threshold calibrated for the
# shipped default (stored in its run.json), by `PYTHONPATH=. python bench/abstention.py --labels
# bench/data/abstention-provenance.jsonl` (docs/results.md, "Abstention").
ABSTAIN_SIGNAL = "combined"
ABSTAIN_WEIGHTS = {"top_score": 7.3412, "logprob": 2.2351, "support": 1.3949, "words": -0.0557, "coverage": -0.7589,
                   "judge": 1.2899, "judge_answer": -0.5146, "answer_coverage": 1.7963}
