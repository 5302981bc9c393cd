"""Generator adapters: one interface over seq2seq models (BART, T5) and causal LMs.

The RAG layer never talks to a transformers model directly. It asks a :class:`Generator` to

1. ``contexts(questions, passages)``: build the ``B*K`` generator inputs, one per (input, document),
   laid out input-major (row ``b*K + k``);
2. ``encode(contexts)``: run the part that depends only on the context once (the seq2seq encoder, or
   the causal LM's prompt prefill) and keep it as a :class:`Memory`;
3. ``target_logprobs(memory, rows, targets, training=False)``: teacher-forced log-probabilities of answer
   tokens (training, with ``training=True``, and rescoring hypotheses in Thorough decoding) reusing that
   memory;
4. ``begin(memory, rows)`` / ``DecodeState.step`` / ``reorder`` / ``select``: incremental decoding with a
   key/value cache, for beam search.

Targets are *answer tokens* ``y_1..y_T`` (no start token); position ``t`` of ``target_logprobs`` is the
distribution of ``y_t`` given ``y_<t``. A seq2seq generator feeds ``[decoder_start, y_1..y_{T-1}]`` to its
decoder exactly as transformers' RAG does.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn
from transformers import Cache, DynamicCache, EncoderDecoderCache

from openbook.models.budget import fit_questions
from openbook.models.device import module_device
from openbook.models.encoders import PassageLike


def cache_argument(model: nn.Module) -> str:
    """The name under which ``model.forward`` takes its key/value cache: ``cache`` in recent transformers 5
    releases (which warn at every call that names it ``past_key_values``), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out) -> Cache:
    """The key/value cache of a model output, under either of its names (:func:`cache_argument`)."""
    fields = getattr(type(out), "__dataclass_fields__", {})
    return out.cache if "cache" in fields else out.past_key_values


@dataclass
class Contexts:
    """Tokenised generator inputs for ``B`` inputs times ``K`` documents (row ``b*K + k``)."""

    input_ids: torch.Tensor  # (B*K, L)
    attention_mask: torch.Tensor  # (B*K, L)
    n_docs: int
    truncated: int = 0  # how many rows were cut at the maximum context length


@dataclass
class Memory:
    """What a generator computed once per (input, document) row and reuses for every pass."""

    hidden: torch.Tensor | None  # seq2seq encoder output (N, L, H); None for causal LMs
    attention_mask: torch.Tensor  # (N, L)
    extra: dict = field(default_factory=dict)  # adapter-specific (prompt caches, last logits)


#: What running one more, separate group of rows costs, in padded token positions (the call overhead and
#: the smaller matrix products); :func:`length_groups` splits only where padding costs more than this.
GROUP_COST_TOKENS = 64


def length_groups(lengths: Sequence[int], group_cost: int = GROUP_COST_TOKENS) -> list[list[int]]:
    """Rows grouped by length so that padding each group only to its own longest row costs least.

    Contexts of one batch differ in length (the demo passages give prompts of 76 to 216 tokens), and a
    batch padded to its longest row spends a third of the encoder's (or a causal LM's prefill) work on
    pads. Rows are sorted by length and cut into consecutive groups minimising
    ``sum(rows * longest) + group_cost * groups`` (an exact dynamic programme, O(n^2) for n rows).
    Returns the row indices of each group, shortest rows first; one group holding every row means
    "don't split".
    """
    n = len(lengths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    sorted_lengths = [max(0, int(lengths[i])) for i in order]
    best = [0] + [None] * n  # best[j]: cheapest cost of the first j sorted rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        width = sorted_lengths[j - 1]  # the longest of rows i..j-1, whatever i
        for i in range(j):
            cost = best[i] + (j - i) * width + group_cost
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def regroup_rows(parts: Sequence[torch.Tensor], groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Concatenate per-group results (dim 0) and put the rows back in their original order."""
    stacked = parts[0] if len(parts) == 1 else torch.cat(list(parts), dim=0)
    order = torch.tensor([i for group in groups for i in group], dtype=torch.long, device=stacked.device)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=stacked.device)
    return stacked.index_select(0, inverse)


class DecodeState(Protocol):
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row ``(N,)``; return next-token logits ``(N, V)`` (float32)."""

    def reorder(self, index: torch.Tensor) -> None:
        """Beam reordering inside a context group: only the state that depends on the prefix moves."""

    def select(self, index: torch.Tensor) -> None:
        """Arbitrary row selection/expansion, including the per-context state."""


class Generator(nn.Module):
    """The interface the RAG layer uses; subclasses adapt one family of transformers models."""

    model: nn.Module
    tokenizer: object
    is_seq2seq: bool
    bos_token_id: int | None = None  # a first answer token whose score rescoring may exclude
    forced_bos_token_id: int | None = None  # decoding constraints from the generation config
    forced_eos_token_id: int | None = None
    #: ``encode`` runs contexts in length groups (:func:`length_groups`) with this cost per extra group, in
    #: padded tokens; ``None`` runs every batch as one padded block.
    length_group_cost: int | None = GROUP_COST_TOKENS

    def _length_groups(self, lengths: torch.Tensor) -> list[list[int]]:
        if self.length_group_cost is None:
            return [list(range(len(lengths)))]
        return length_groups(lengths.tolist(), self.length_group_cost)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are: :meth:`encode` and :meth:`encode_targets` put their tensors there."""
        return module_device(self.model)

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    # subclasses implement: contexts, encode, target_logprobs, begin, start_token_id,
    # eos_token_id, pad_token_id, decode_tokens, encode_targets

    def _answer_ids(self, answer: str) -> list[int]:
        """The answer's token ids (no special tokens); causal LMs tokenise it as a prompt continuation."""
        return self.tokenizer(answer, add_special_tokens=False)["input_ids"]

    def encode_targets(self, answers: Sequence[str], max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenise answers into ``(targets, mask)``: answer tokens followed by EOS, right-padded, on the
        generator's :attr:`device`."""
        rows = []
        for answer in answers:
            ids = self._answer_ids(answer)
            if max_length is not None:
                ids = ids[: max_length - 1]
            rows.append(ids + [self.eos_token_id])
        width = max(len(r) for r in rows)
        targets = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            targets[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = True
        return targets.to(self.device), mask.to(self.device)

    def target_token_logprobs(
        self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor | None = None,
        max_elements: int = 1 << 26,
    ) -> torch.Tensor:
        """log p(targets[n, t] | context row rows[n], targets[n, :t]) -> ``(N, T)``.

        ``lengths (N,)``, if given, says that only positions ``t < lengths[n]`` are needed (the rest are
        returned as 0). Rows then run shortest first, each chunk cut to its own longest row, so the
        trailing pads of short hypotheses cost nothing: position t depends only on ``targets[n, :t]``, so
        cutting changes no value. Chunks hold at most ``max_elements`` vocabulary scores, so rescoring
        hundreds of hypotheses against every document never needs gigabytes of logits.
        """
        N, T = targets.shape
        V = max(1, self.vocab_size)
        out = targets.new_zeros((N, T), dtype=torch.float32)
        if lengths is None:
            lengths = torch.full((N,), T, dtype=torch.long, device=targets.device)
        lengths = lengths.clamp(0, T)
        order = torch.argsort(lengths, stable=True)
        sorted_lengths = lengths[order].tolist()
        start = 0
        while start < N:
            end = min(N, start + max(1, max_elements // (V * max(1, sorted_lengths[start]))))
            while end - start > 1 and sorted_lengths[end - 1] * (end - start) * V > max_elements:
                end = start + max(1, max_elements // (V * max(1, sorted_lengths[end - 1])))
            width = sorted_lengths[end - 1]
            if width > 0:
                idx = order[start:end]
                chunk_targets = targets[idx, :width]
                out[idx, :width] = self._gathered_logprobs(memory, rows[idx], chunk_targets)
            start = end
        return out.masked_fill_(torch.arange(T, device=out.device)[None, :] >= lengths[:, None], 0.0)

    def _gathered_logprobs(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p of each target token ``(N, T)``: one chunk of :meth:`target_token_logprobs`."""
        return self.target_logprobs(memory, rows, targets).gather(-1, targets[:, :, None]).squeeze(-1)

    def prepare_rescoring(self, memory: Memory) -> None:
        """Before many teacher-forced passes over the same memory rows (Thorough decoding): precompute
        what every pass against a row shares. The default does nothing."""

    def end_rescoring(self, memory: Memory) -> None:
        """Drop what :meth:`prepare_rescoring` kept."""

    def decode_tokens(self, tokens: torch.Tensor) -> list[str]:
        """Answer tokens (no start token) -> strings, stopping at EOS."""
        texts = []
        for row in tokens.tolist():
            if self.eos_token_id in row:
                row = row[: row.index(self.eos_token_id)]
            texts.append(self.tokenizer.decode(row, skip_special_tokens=True).strip())
        return texts


class Seq2SeqGenerator(Generator):
    """BART / T5 / any ``AutoModelForSeq2SeqLM``, fed exactly as transformers' RAG feeds it.

    Context string: ``prefix + title + " / " + text + " // " + question`` with double spaces collapsed,
    tokenised with truncation at ``max_context_length`` (RagConfig's ``max_combined_length``, 300). A
    question longer than half that budget is cut first, with a warning (:mod:`openbook.models.budget`).
    """

    is_seq2seq = True

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        max_context_length: int = 300,
        title_sep: str = " / ",
        doc_sep: str = " // ",
        prefix: str | None = None,
        question_tokenizer=None,
        training_start_token_id: int | None = None,
    ):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_context_length = max_context_length
        self.title_sep = title_sep
        self.doc_sep = doc_sep
        self.prefix = prefix if prefix is not None else (getattr(model.config, "prefix", None) or "")
        gen = model.generation_config
        self.start_token_id = gen.decoder_start_token_id
        if self.start_token_id is None:
            self.start_token_id = model.config.decoder_start_token_id
        eos = gen.eos_token_id if gen.eos_token_id is not None else model.config.eos_token_id
        self.eos_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else model.config.pad_token_id
        self.bos_token_id = getattr(model.config, "bos_token_id", None)
        self.forced_bos_token_id = getattr(gen, "forced_bos_token_id", None)
        self.forced_eos_token_id = getattr(gen, "forced_eos_token_id", None)
        # Two choices that make an imported transformers RAG checkpoint (openbook.models.hf_rag) see exactly
        # what transformers feeds it; openbook's own generators leave both off (None):
        # * transformers' RagRetriever writes the question into the context as the question encoder's
        #   tokenizer decodes it (batch_decode(input_ids, skip_special_tokens=True)): DPR's uncased tokenizer
        #   lowercases it. With ``question_tokenizer`` set, contexts() round-trips questions through it.
        # * transformers' RAG fine-tuning tokenises a target with the generator's tokenizer (BART: "<s> y </s>")
        #   and feeds it to the decoder as it is (decoder_input_ids = labels), so that leading <s>, not
        #   decoder_start_token_id, is the decoder's first input and is not scored. With
        #   ``training_start_token_id`` set, target_logprobs(..., training=True) starts the decoder with it.
        self.question_tokenizer = question_tokenizer
        self.training_start_token_id = training_start_token_id

    def context_string(self, question: str, passage: PassageLike) -> str:
        title = passage.title.removeprefix('"').removesuffix('"')
        return (self.prefix + title + self.title_sep + passage.text + self.doc_sep + question).replace("  ", " ")

    def contexts(self, questions: Sequence[str], passages: Sequence[Sequence[PassageLike]]) -> Contexts:
        n_docs = len(passages[0])
        if self.question_tokenizer is not None:  # as transformers' RagRetriever (see __init__)
            ids = self.question_tokenizer(list(questions), truncation=True)["input_ids"]
            questions = self.question_tokenizer.batch_decode(ids, skip_special_tokens=True)
        questions = fit_questions(self.tokenizer, questions, self.max_context_length)
        strings = [self.context_string(q, p) for q, docs in zip(questions, passages) for p in docs]
        enc = self.tokenizer(
            strings, max_length=self.max_context_length, truncation=True, padding="longest", return_tensors="pt"
        )
        full = self.tokenizer(strings, add_special_tokens=True)["input_ids"]
        truncated = sum(len(ids) > self.max_context_length for ids in full)
        return Contexts(enc["input_ids"], enc["attention_mask"], n_docs, truncated)

    def encode(self, contexts: Contexts) -> Memory:
        """Run the encoder once per context. Right-padded rows of different lengths run in length groups
        (:func:`length_groups`), each cut to its own longest row, so pads cost (almost) nothing; the
        outputs are zero at pad positions, which the cross-attention mask hides, so every decoder output
        is the same as with one padded batch."""
        encoder = self.model.get_encoder()
        ids, mask = contexts.input_ids.to(self.device), contexts.attention_mask.to(self.device)
        lengths = mask.long().sum(-1)
        steps = torch.arange(mask.shape[1], device=mask.device)
        right_padded = bool((mask.bool() == (steps[None, :] < lengths[:, None])).all())
        groups = self._length_groups(lengths) if right_padded else []
        if len(groups) <= 1:
            out = encoder(input_ids=ids, attention_mask=mask, return_dict=True)
            return Memory(out.last_hidden_state, mask)
        parts = []
        for group in groups:
            rows = torch.tensor(group, dtype=torch.long, device=mask.device)
            width = max(1, int(lengths[rows].max()))
            hidden = encoder(input_ids=ids[rows, :width], attention_mask=mask[rows, :width],
                             return_dict=True).last_hidden_state
            parts.append(nn.functional.pad(hidden, (0, 0, 0, mask.shape[1] - width)))
        return Memory(regroup_rows(parts, groups), mask)

    def _decoder_inputs(self, targets: torch.Tensor, training: bool = False) -> torch.Tensor:
        first = self.training_start_token_id if training and self.training_start_token_id is not None else None
        start = targets.new_full((targets.shape[0], 1), self.start_token_id if first is None else first)
        return torch.cat([start, targets[:, :-1]], dim=1)

    def prepare_rescoring(self, memory: Memory) -> None:
        """Run the decoder's first step (the start token) once per memory row and keep its logits and its
        cache. Every hypothesis rescored against a row then reuses that row's cross-attention keys and
        values (computed from the encoder output once instead of once per hypothesis, as transformers'
        Thorough decoding does) and the distribution of its first token."""
        if "rescoring" in memory.extra:
            return
        n, device = memory.attention_mask.shape[0], memory.attention_mask.device
        state = self.begin(memory, torch.arange(n, device=device))
        start = torch.full((n,), self.start_token_id, dtype=torch.long, device=device)
        first = torch.log_softmax(state.step(start), dim=-1)
        memory.extra["rescoring"] = (first, state.cache)

    def end_rescoring(self, memory: Memory) -> None:
        memory.extra.pop("rescoring", None)

    def _gathered_logprobs(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if "rescoring" not in memory.extra:
            return super()._gathered_logprobs(memory, rows, targets)
        first_logprobs, cache = memory.extra["rescoring"]
        first = first_logprobs[rows, targets[:, 0]][:, None]
        if targets.shape[1] == 1:
            return first
        layers = zip(cache.self_attention_cache.layers, cache.cross_attention_cache.layers)
        rows_cache = EncoderDecoderCache(
            [tuple(t.index_select(0, rows) for t in (s.keys, s.values, c.keys, c.values)) for s, c in layers]
        )
        logits = self.model(
            encoder_outputs=(memory.hidden.index_select(0, rows),),
            attention_mask=memory.attention_mask.index_select(0, rows),
            decoder_input_ids=targets[:, :-1],
            **{cache_argument(self.model): rows_cache},
            use_cache=True,
            return_dict=True,
        ).logits
        rest = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, 1:, None]).squeeze(-1)
        return torch.cat([first, rest], dim=1)

    def target_logits(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor,
                      training: bool = False) -> torch.Tensor:
        """Raw logits ``(N, T, V)`` for answer ``targets (N, T)`` against memory rows ``rows (N,)``."""
        out = self.model(
            encoder_outputs=(memory.hidden.index_select(0, rows),),
            attention_mask=memory.attention_mask.index_select(0, rows),
            decoder_input_ids=self._decoder_inputs(targets, training),
            use_cache=False,
            return_dict=True,
        )
        return out.logits

    def target_logprobs(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor,
                        training: bool = False) -> torch.Tensor:
        return torch.log_softmax(self.target_logits(memory, rows, targets, training).float(), dim=-1)

    def begin(self, memory: Memory, rows: torch.Tensor) -> Seq2SeqDecodeState:
        return Seq2SeqDecodeState(self.model, memory.hidden.index_select(0, rows),
                                  memory.attention_mask.index_select(0, rows))


class Seq2SeqDecodeState:
    """Incremental decoding for an encoder-decoder model with a self- and cross-attention cache.

    Beam reordering (:meth:`reorder`) moves only the self-attention cache: every beam of one
    (input, document) row attends to the same encoder output, so its cross-attention keys and values
    never need copying — transformers' RAG copies them at every step.
    """

    def __init__(self, model: nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor):
        self.model = model
        self.hidden = hidden
        self.attention_mask = attention_mask
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self._cache_argument = cache_argument(model)  # once, not at every step

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.model(
            encoder_outputs=(self.hidden,),
            attention_mask=self.attention_mask,
            decoder_input_ids=tokens[:, None],
            **{self._cache_argument: self.cache},
            use_cache=True,
            return_dict=True,
        )
        self.cache = output_cache(out)
        return out.logits[:, -1, :].float()

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.self_attention_cache.reorder_cache(index)

    def select(self, index: torch.Tensor) -> None:
        self.cache.self_attention_cache.reorder_cache(index)
        self.cache.cross_attention_cache.reorder_cache(index)
        self.hidden = self.hidden.index_select(0, index)
        self.attention_mask = self.attention_mask.index_select(0, index)
