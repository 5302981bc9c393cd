"""A passage judge: a cross-encoder that reads a question and one passage together and scores whether the passage
holds the question's answer (a logit; above 0 means yes). A judge that reads the answer too (``reads_answer``)
scores whether the passage gives *this* answer to the question.

Retrieval scores a question and a passage apart, d(z)^T q(x); the judge reads them as one input, the way
rerankers do, so it sees whether the passage names what the question asks about. Abstention
(:mod:`openbook.rag.abstain`) uses its best logit over the passages read as one of its features.

It is the retriever's own encoder (the packaged all-MiniLM-L6-v2) with LoRA adapters on its linear layers and one
linear head on the mean of its last hidden states (of every token, or of the question and answer only), trained by
``scripts/train_judge.py`` on the training part of the default's questions (label: the passage contains an answer,
DPR's ``has_answer``; for a judge that reads the answer, the answer is a gold answer the passage holds or a wrong
one, see the script). The adapters and the head ship as one safetensors file with a JSON file beside it
(:func:`openbook.models.weights.write_tensors`) naming the LoRA settings, the input length, the pooling and whether
it reads the answer; loading folds the adapters into the encoder's weights
(:func:`openbook.models.adapters.merge_lora_tensors`), so judging costs what the plain encoder costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import torch

from openbook.errors import InputError
from openbook.models.adapters import LoraSettings, add_lora, merge_lora_tensors
from openbook.models.precision import TORCH_DTYPES
from openbook.models.tensors import pad_features, pool
from openbook.models.weights import read_tensors, write_tensors

HEAD = ("head.weight", "head.bias")
BATCH = 32  # pairs per forward pass when judging
ANSWER_CUE = "answer:"  # between the question and the answer, for a judge that reads the answer
POOLINGS = ("mean", "first")  # the mean of every token's last state, or of the first segment's (question, answer)


class PassageJudge(torch.nn.Module):
    """``judge(questions, passages, answers)`` -> one logit per (question, passage) pair; :meth:`score` gives them
    without gradients. ``answers`` are read only by a judge that ``reads_answer``."""

    def __init__(self, model: torch.nn.Module, tokenizer, max_length: int = 256, reads_answer: bool = False,
                 pooling: str = "mean"):
        super().__init__()
        self.model, self.tokenizer, self.max_length = model, tokenizer, int(max_length)
        self.reads_answer = bool(reads_answer)
        if pooling not in POOLINGS:
            raise InputError(f"a passage judge pools {' or '.join(POOLINGS)}, not {pooling!r}")
        if pooling == "first" and "token_type_ids" not in getattr(tokenizer, "model_input_names", ()):
            raise InputError("a passage judge pooling 'first' needs a base whose tokenizer marks the two segments "
                             "(token_type_ids, as BERT's); use pooling 'mean'")
        self.pooling = pooling
        self.head = torch.nn.Linear(model.config.hidden_size, 1)

    @classmethod
    def new(cls, lora: LoraSettings, max_length: int = 256, base: str | Path | None = None,
            reads_answer: bool = False, pooling: str = "mean") -> PassageJudge:
        """An untrained judge on ``base`` (default: the packaged MiniLM) with LoRA adapters to train."""
        judge = cls(*_base(base), max_length=max_length, reads_answer=reads_answer, pooling=pooling)
        add_lora(judge.model, lora)
        judge.lora = lora
        return judge

    @classmethod
    def load(cls, path: str | Path, base: str | Path | None = None, dtype: str = "float32") -> PassageJudge:
        """The judge saved at ``path`` by :meth:`save`, its adapters folded into ``base``'s weights, the encoder
        then cast to ``dtype`` (``"float32"`` or ``"bfloat16"``; the head stays float32)."""
        if dtype not in TORCH_DTYPES:
            raise InputError(f"the passage judge runs in {' or '.join(TORCH_DTYPES)}, not {dtype!r}")
        tensors, data = read_tensors(path, with_data=True)
        reads_answer = data.get("reads_answer", False)
        if not isinstance(reads_answer, bool):
            raise InputError(f"{path}: 'reads_answer' must be true or false, got {reads_answer!r}")
        pooling = data.get("pooling", "mean")
        if pooling not in POOLINGS:
            raise InputError(f"{path}: 'pooling' must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        judge = cls(*_base(base), max_length=int(data.get("max_length", 256)), reads_answer=reads_answer,
                    pooling=pooling)
        rest = merge_lora_tensors(judge.model, tensors, LoraSettings.from_dict(data["lora"]))
        if set(rest) != set(HEAD):
            raise InputError(f"{path} is not a passage judge: it must hold the adapters and {', '.join(HEAD)}")
        judge.load_state_dict({name: rest[name] for name in HEAD}, strict=False)
        judge.model.to(TORCH_DTYPES[dtype])
        return judge.eval()

    def save(self, path: str | Path) -> None:
        """The adapters and the head to ``path`` (safetensors) and their settings to ``path`` with ``.json``."""
        tensors = {name: t for name, t in self.state_dict().items() if "lora_" in name or name in HEAD}
        tensors = {name.removeprefix("model."): t for name, t in tensors.items()}
        write_tensors(path, tensors, {"lora": self.lora.to_dict(), "max_length": self.max_length,
                                      "reads_answer": self.reads_answer, "pooling": self.pooling})

    def forward(self, questions: Sequence[str], passages: Sequence[tuple[str, str]],
                answers: Sequence[str] | None = None) -> torch.Tensor:
        """Logits ``(n,)`` of the n pairs ``questions[i]`` and ``passages[i] = (title, text)``, read as "question
        [SEP] title. text", or "question answer: answers[i] [SEP] title. text" by a judge that reads the answer
        (the passage cut to fit ``max_length`` tokens). The logit reads the mean of the last hidden states of every
        token, or with ``pooling="first"`` of the first segment's only (the question and its answer, which then
        carry the passage in through attention: a few answer tokens are not lost in a mean over the passage)."""
        joined = [f"{title}. {text}" if title.strip() else text for title, text in passages]
        firsts = list(questions)
        if self.reads_answer:
            if answers is None or len(answers) != len(firsts):
                raise InputError("this passage judge reads the answer: give one answer per question")
            firsts = [f"{q} {ANSWER_CUE} {a}" for q, a in zip(firsts, answers)]
        encoded = self.tokenizer(firsts, joined, truncation="longest_first", max_length=self.max_length)
        features = [{key: encoded[key][i] for key in encoded} for i in range(len(joined))]
        batch = pad_features(features, self.tokenizer.pad_token_id or 0)
        states = self.model(**batch).last_hidden_state.float()  # pooled and judged in float32 whatever the dtype
        mask = batch["attention_mask"]
        if self.pooling == "first":
            mask = mask * (batch["token_type_ids"] == 0)
        hidden = pool(SimpleNamespace(last_hidden_state=states), mask, "mean")
        return self.head(hidden).squeeze(-1)

    @torch.no_grad()
    def score(self, questions: Sequence[str], passages: Sequence[tuple[str, str]],
              answers: Sequence[str] | None = None) -> list[float]:
        """The logit of each ``(title, text)`` passage holding the answer to its question (the given answer, for a
        judge that reads it), ``BATCH`` pairs a pass."""
        out: list[float] = []
        for start in range(0, len(passages), BATCH):
            part = None if answers is None or not self.reads_answer else answers[start: start + BATCH]
            out += self(questions[start: start + BATCH], passages[start: start + BATCH], part).tolist()
        return out


class LazyJudge:
    """A :class:`PassageJudge` loaded from ``path`` when it first judges, so that a command that only retrieves
    (``openbook retrieve``, ``/v1/retrieve``) never loads it. ``dtype`` is the one it will run in (set it before
    it first judges: abstention thresholds are calibrated on one)."""

    def __init__(self, path: str | Path, dtype: str = "float32"):
        self.path, self.dtype, self._judge = Path(path), dtype, None

    def score(self, questions: Sequence[str], passages: Sequence[tuple[str, str]],
              answers: Sequence[str] | None = None) -> list[float]:
        if self._judge is None:
            self._judge = PassageJudge.load(self.path, dtype=self.dtype)
        return self._judge.score(questions, passages, answers)


def _base(base: str | Path | None):
    """The encoder the judge is built on, as ``(model, tokenizer)``: ``base`` or the packaged MiniLM."""
    from openbook.models.loading import load_encoder

    encoder = load_encoder(str(base) if base else "default")
    return encoder.model, encoder.tokenizer
