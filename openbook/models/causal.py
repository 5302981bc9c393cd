"""The RAG generator p_theta(y_t | x, z, y_<t) as a decoder-only (causal) language model.

A causal LM has no encoder: the "context" of RAG is a *prompt* that shows one retrieved passage and the
question, and the answer is the continuation of that prompt. :class:`CausalLMGenerator` adapts such a
model (the offline default is SmolLM2-135M-Instruct, a Llama-architecture chat model) to the
:class:`~openbook.models.generators.Generator` interface:

* ``contexts`` renders one prompt per (question, passage) -- through the tokenizer's chat template when
  it has one, else a plain ``Title/Passage/Question/Answer:`` template -- cuts the *passage* (never the
  end of the template) so the prompt fits ``max_context_length`` tokens, and LEFT-pads the rows so that
  every prompt ends at the right edge; a question longer than its budget (half the context,
  :mod:`openbook.models.budget`) is cut first, with a warning;
* ``encode`` prefills all prompts once, keeping the key/value cache and the logits at the last prompt
  position (the distribution of the first answer token);
* ``target_logprobs`` and ``begin``/``step`` continue from a copy of that cache, with position ids that
  continue after each row's own prompt length (left padding does not shift positions) and an attention
  mask that keeps the pads hidden.

The memory's cache is never modified: every pass works on an ``index_select``-ed copy of its rows, so one
prefill serves training, rescoring and beam search alike. Everything stays differentiable.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Sequence

import torch
from torch import nn
from transformers import Cache, DynamicCache

from openbook.models.budget import cut_points, fit_questions
from openbook.models.generators import (
    Contexts,
    Generator,
    Memory,
    PassageLike,
    cache_argument,
    output_cache,
    regroup_rows,
)

__all__ = [
    "DEFAULT_CHAT_PROMPT",
    "DEFAULT_PLAIN_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "CausalDecodeState",
    "CausalLMGenerator",
]

logger = logging.getLogger(__name__)

#: The user message of the chat-template path. Fields: ``{title}``, ``{text}``, ``{question}`` (literal
#: braces must be doubled, as in :meth:`str.format`).
#: Passage first, then the question and the instruction: on SmolLM2-135M-Instruct zero-shot this
#: made the answer name the fact from the passage more often than an instruction-first prompt. The title
#: comes *after* the text: written first ("Aruba: Mike Eman is ..."), a small model copies it as the answer
#: (the hot-swap experiment's passages are titled with the country, and the answer was the country).
DEFAULT_CHAT_PROMPT = "{text}\n(Title: {title})\n\nQuestion: {question}\nAnswer in a few words, using the passage above."

#: The system message of the chat path: an empty one. ``None`` would let a template write its built-in default
#: (SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face", ~20 tokens of every
#: prompt, which the model then echoes: "Who discovered penicillin?" -> "ScottolLM").
DEFAULT_SYSTEM_PROMPT = ""

#: The whole prompt of the plain (no chat template) path; the answer continues after ``Answer:``.
DEFAULT_PLAIN_PROMPT = "Title: {title}\nPassage: {text}\nQuestion: {question}\nAnswer:"

# Stand-ins rendered into the template to find where the question (and the text after it) lies.
_SENTINEL = "OPENBOOKSENTINEL"


def _plain_cache_layers(model: nn.Module) -> bool:
    """True if the model's key/value cache layers are plain ``DynamicLayer``s (keys and values only)."""
    try:
        return all(type(layer).__name__ == "DynamicLayer" for layer in DynamicCache(config=model.config).layers)
    except Exception:
        logger.debug("could not tell the cache layer types of %s", type(model).__name__, exc_info=True)
        return False


def select_cache_rows(cache: Cache, index: torch.Tensor) -> Cache:
    """A new cache holding rows ``index`` of ``cache`` (rows may repeat); ``cache`` is left untouched.

    Layers are shallow-copied and then re-indexed; re-indexing *assigns* new key/value tensors
    (``index_select``), so the source cache's tensors are never written to, and gradients flow back.
    """
    new = copy.copy(cache)
    new.layers = [copy.copy(layer) for layer in cache.layers]
    new.reorder_cache(index)
    return new


class CausalLMGenerator(Generator):
    """RAG's generator as a decoder-only LM that receives ``(model, tokenizer)`` (loaded elsewhere).

    Args:
        model: an ``AutoModelForCausalLM``-style model accepting ``attention_mask``, ``position_ids``,
            ``past_key_values`` and ``use_cache`` (Llama, Qwen2, Mistral, GPT-NeoX, ...).
        tokenizer: its tokenizer (a fast tokenizer is needed for exact passage truncation; slow ones fall
            back to decode-based truncation).
        max_context_length: the longest prompt, in tokens (default 384). Longer prompts lose the end of the
            passage text (then, if still too long, of the title); the template is kept, and the question
            up to half of this budget (:func:`~openbook.models.budget.fit_questions`).
        prompt_template: the prompt with ``{title}``, ``{text}`` and ``{question}`` fields. On the chat path it
            is the *user message* (default :data:`DEFAULT_CHAT_PROMPT`), rendered by
            ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``; on the plain path it is the
            whole prompt (default :data:`DEFAULT_PLAIN_PROMPT`).
        system_prompt: the system message (chat path only; default :data:`DEFAULT_SYSTEM_PROMPT`, an empty
            one). ``None`` sends none, so a template with a built-in default system message (SmolLM2's) uses
            its own; a template that refuses a system role gets none.
        use_chat_template: force (``True``) or forbid (``False``) the chat path; ``None`` uses it iff the
            tokenizer has a ``chat_template``.
        eos_token_id: the token that ends an answer. Default: on the chat path the template's end-of-turn
            token (``<|im_end|>`` for SmolLM2, found by rendering an assistant turn), else
            ``tokenizer.eos_token_id``.
        answer_prefix: what separates the prompt from the answer text when answers are tokenised
            (:meth:`encode_targets`). Default ``" "`` on the plain path (``"Answer: Paris"``), ``""`` on the
            chat path (the generation prompt ends with a newline).
        pad_token_id: the filler of left-padded prompts and right-padded targets (always masked). Default: the
            tokenizer's pad token, else its EOS -- unless that is the answer's EOS (chat models often pad with
            ``<|im_end|>``), then another special token: the RAG layer recognises padding as
            ``target == pad_token_id`` when rescoring, which must not swallow the EOS.
    """

    is_seq2seq = False
    bos_token_id = None  # answers never start with BOS: rescoring keeps every answer token's score

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        max_context_length: int = 384,
        prompt_template: str | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        use_chat_template: bool | None = None,
        eos_token_id: int | None = None,
        answer_prefix: str | None = None,
        pad_token_id: int | None = None,
    ):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_context_length = max_context_length
        if use_chat_template is None:
            use_chat_template = getattr(tokenizer, "chat_template", None) is not None
        self.use_chat_template = bool(use_chat_template)
        self.prompt_template = DEFAULT_CHAT_PROMPT if self.use_chat_template else DEFAULT_PLAIN_PROMPT
        self.system_prompt = None
        self.answer_prefix = answer_prefix if answer_prefix is not None else ("" if self.use_chat_template else " ")

        self.eos_token_id = eos_token_id if eos_token_id is not None else self._default_eos()
        if self.eos_token_id is None:
            raise ValueError("no EOS token: pass eos_token_id")
        self.pad_token_id = pad_token_id if pad_token_id is not None else self._default_pad()
        # Fed as the first decoding token only to keep the seq2seq-shaped beam search happy: step() ignores it.
        bos = tokenizer.bos_token_id
        self.start_token_id = bos if bos is not None else self.pad_token_id

        # Special tokens the tokenizer puts before a plain text (BOS); chat templates write their own.
        self._prefix_ids = [] if self.use_chat_template else self._leading_special_ids()
        self.set_prompt(prompt_template, system_prompt)
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_argument = cache_argument(model)
        # Whether the model's cache layers hold only keys and values: then prompts can be prefilled in length
        # groups and their caches merged (sliding-window layers keep more state).
        self._plain_cache = _plain_cache_layers(model)

    # ------------------------------------------------------------------ prompts

    def _default_eos(self) -> int | None:
        tok = self.tokenizer
        if self.use_chat_template:
            eot = self._end_of_turn_id()
            if eot is not None:
                return eot
        return tok.eos_token_id

    def _default_pad(self) -> int:
        tok = self.tokenizer
        candidates = [tok.pad_token_id, tok.eos_token_id, tok.unk_token_id, tok.bos_token_id, *tok.all_special_ids]
        for cand in candidates:
            if cand is not None and cand != self.eos_token_id:
                return cand
        return self.eos_token_id  # a tokenizer with a single special token: nothing else to use

    def _end_of_turn_id(self) -> int | None:
        """The token the chat template writes right after an assistant message (``<|im_end|>``, ...)."""
        tok = self.tokenizer
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _SENTINEL}]
        try:
            text = tok.apply_chat_template(messages, tokenize=False)
        except Exception:
            logger.debug("chat template failed to render an assistant turn", exc_info=True)
            return None
        if _SENTINEL not in text:
            return None
        tail = text.rsplit(_SENTINEL, 1)[-1].lstrip(" ")
        ids = tok(tail, add_special_tokens=False)["input_ids"] if tail else []
        if not ids:
            return None
        special = set(tok.all_special_ids) | set(tok.get_added_vocab().values())
        if ids[0] in special:
            return ids[0]
        return None

    def _leading_special_ids(self) -> list[int]:
        """The ids the tokenizer prepends to a text (e.g. BOS); trailing ones (an appended EOS) are dropped."""
        tok = self.tokenizer
        plain = tok("a", add_special_tokens=False)["input_ids"]
        full = tok("a", add_special_tokens=True)["input_ids"]
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                return list(full[:start])
        return []

    def set_prompt(self, template: str | None = None, system: str | None = DEFAULT_SYSTEM_PROMPT) -> None:
        """Use another prompt template (``None``: this path's default) and system message (see the class).

        A training run records both in its run.json and :func:`~openbook.rag.assemble.load_run` sets them
        again, so a run is always prompted the way it was trained."""
        template = template if template is not None else (
            DEFAULT_CHAT_PROMPT if self.use_chat_template else DEFAULT_PLAIN_PROMPT)
        for name in ("{title}", "{text}", "{question}"):
            if name not in template:
                raise ValueError(f"prompt_template must contain the field {name}: {template!r}")
        self.prompt_template, self.system_prompt = template, system
        if self.use_chat_template and system is not None:
            try:
                self.render(_SENTINEL, "t", "p")
            except Exception:  # e.g. a template that raises on a system role (Gemma's): send none
                logger.debug("the chat template refused a system message; sending none", exc_info=True)
                self.system_prompt = None
        # The prompt text after the question: answers are tokenised as its continuation.
        self._answer_anchor = self.render(_SENTINEL, "t", "p").rsplit(_SENTINEL, 1)[-1]

    def prompt_settings(self) -> dict:
        """The prompt as a training run records it (:meth:`set_prompt`'s arguments)."""
        return {"template": self.prompt_template, "system": self.system_prompt}

    def render(self, question: str, title: str, text: str) -> str:
        """The prompt string for one (question, passage)."""
        body = self.prompt_template.format(title=title, text=text, question=question)
        if not self.use_chat_template:
            return body
        messages = [{"role": "user", "content": body}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def _tokenize(self, prompts: list[str]) -> list[list[int]]:
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        return [self._prefix_ids + list(row) for row in ids]

    def _fit(self, question: str, title: str, text: str, ids: list[int]) -> tuple[list[int], bool]:
        """Shorten the passage (text, then title) until the prompt fits; returns (ids, fits)."""
        limit = self.max_context_length
        for field in ("text", "title"):
            value = text if field == "text" else title
            cuts = cut_points(self.tokenizer, value)
            keep = len(cuts)
            while len(ids) > limit and keep > 0:
                keep = max(0, min(keep - 1, keep - (len(ids) - limit)))
                value_cut = value[: cuts[keep - 1]] if keep > 0 else ""
                if field == "text":
                    text = value_cut
                else:
                    title = value_cut
                ids = self._tokenize([self.render(question, title, text)])[0]
            if len(ids) <= limit:
                return ids, True
        return ids, False

    def contexts(self, questions: Sequence[str], passages: Sequence[Sequence[PassageLike]]) -> Contexts:
        """One left-padded prompt per (question, passage), rows input-major ``b*K + k``."""
        n_docs = len(passages[0])
        questions = fit_questions(self.tokenizer, questions, self.max_context_length)
        items = []
        for question, docs in zip(questions, passages):
            if len(docs) != n_docs:
                raise ValueError(f"every input needs the same number of passages ({n_docs}), got {len(docs)}")
            for p in docs:
                items.append((question, p.title.removeprefix('"').removesuffix('"'), p.text))
        rows = self._tokenize([self.render(*item) for item in items])
        truncated = 0
        for i, (item, ids) in enumerate(zip(items, rows)):
            if len(ids) <= self.max_context_length:
                continue
            truncated += 1
            rows[i], fits = self._fit(*item, ids)
            if not fits:
                logger.warning(
                    "prompt of %d tokens exceeds max_context_length=%d even without its passage; kept whole",
                    len(rows[i]), self.max_context_length,
                )
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                input_ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
                attention_mask[i, width - len(r) :] = 1
        return Contexts(input_ids, attention_mask, n_docs, truncated)

    # ------------------------------------------------------------------ answers

    def _answer_ids(self, answer: str) -> list[int]:
        """Answer tokens as the model would write them after the prompt (tokenised in that context)."""
        tok = self.tokenizer
        text = self.answer_prefix + answer
        anchor = tok(self._answer_anchor, add_special_tokens=False)["input_ids"] if self._answer_anchor else []
        if anchor:
            full = tok(self._answer_anchor + text, add_special_tokens=False)["input_ids"]
            if full[: len(anchor)] == anchor:
                return list(full[len(anchor) :])
        return list(tok(text, add_special_tokens=False)["input_ids"])

    # ------------------------------------------------------------------ model passes

    def _forward(self, input_ids, attention_mask, position_ids, cache: Cache | None, last_only: bool = False):
        kwargs = {}
        if last_only and self._logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{self._cache_argument: cache},
            use_cache=True,
            return_dict=True,
            **kwargs,
        )
        return out.logits, output_cache(out)

    def encode(self, contexts: Contexts) -> Memory:
        """Prefill every prompt once: ``extra = {"cache", "last_logits" (N, V), "lengths" (N,)}``.

        Prompts of different lengths are prefilled in length groups (:func:`length_groups`), each cut to
        its own longest prompt, so left padding costs (almost) nothing; the groups' key/value caches are
        left-padded with zeros to one width (masked, as pads always are) and put back in row order. Models
        whose cache layers keep more than keys and values (sliding windows) always run one padded block."""
        ids, mask = contexts.input_ids.to(self.device), contexts.attention_mask.to(self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        lengths = mask.long().sum(-1)
        steps_left = torch.arange(mask.shape[1] - 1, -1, -1, device=mask.device)
        left_padded = bool((mask.bool() == (steps_left[None, :] < lengths[:, None])).all())
        groups = self._length_groups(lengths) if left_padded and self._plain_cache else []
        if len(groups) <= 1:
            logits, cache = self._forward(ids, mask, positions, None, last_only=True)
            return Memory(hidden=None, attention_mask=mask,
                          extra={"cache": cache, "last_logits": logits[:, -1, :], "lengths": lengths})
        parts = []  # (first column, last logits, cache) of each group
        for group in groups:
            rows = torch.tensor(group, dtype=torch.long, device=mask.device)
            start = mask.shape[1] - max(1, int(lengths[rows].max()))
            logits, cache = self._forward(ids[rows, start:], mask[rows, start:], positions[rows, start:], None,
                                          last_only=True)
            parts.append((start, logits[:, -1, :], cache))
        merged = copy.copy(parts[0][2])
        merged.layers = []
        for i, layer in enumerate(parts[0][2].layers):
            new = copy.copy(layer)
            for name in ("keys", "values"):  # (rows, heads, width, dim): pad on the left to the full width
                padded = [nn.functional.pad(getattr(cache.layers[i], name), (0, 0, start, 0))
                          for start, _, cache in parts]
                setattr(new, name, regroup_rows(padded, groups))
            merged.layers.append(new)
        last = regroup_rows([logits for _, logits, _ in parts], groups)
        return Memory(hidden=None, attention_mask=mask, extra={"cache": merged, "last_logits": last, "lengths": lengths})

    def target_logits(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Raw logits ``(N, T, V)`` for answer ``targets (N, T)`` after the prompts of memory rows ``rows (N,)``."""
        first = memory.extra["last_logits"].index_select(0, rows)[:, None, :]
        if targets.shape[1] == 1:
            return first
        prompt_mask = memory.attention_mask.index_select(0, rows)
        lengths = memory.extra["lengths"].index_select(0, rows)
        inputs = targets[:, :-1]
        steps = torch.arange(inputs.shape[1], device=inputs.device)
        positions = lengths[:, None].to(inputs.device) + steps[None, :]
        mask = torch.cat([prompt_mask, prompt_mask.new_ones(inputs.shape)], dim=1)
        cache = select_cache_rows(memory.extra["cache"], rows)
        logits, _ = self._forward(inputs, mask, positions, cache)
        return torch.cat([first.to(logits.dtype), logits], dim=1)

    def target_logprobs(self, memory: Memory, rows: torch.Tensor, targets: torch.Tensor,
                        training: bool = False) -> torch.Tensor:
        """log p of answer ``targets`` after each row's prompt; ``training`` changes nothing for a causal LM."""
        return torch.log_softmax(self.target_logits(memory, rows, targets).float(), dim=-1)

    def begin(self, memory: Memory, rows: torch.Tensor) -> CausalDecodeState:
        return CausalDecodeState(
            self,
            select_cache_rows(memory.extra["cache"], rows),
            memory.attention_mask.index_select(0, rows),
            memory.extra["last_logits"].index_select(0, rows),
        )


class CausalDecodeState:
    """Incremental decoding on top of (a private copy of) the prompt cache.

    The first :meth:`step` returns the stored last-prompt logits (its input token, the generator's
    ``start_token_id``, is ignored); each later step appends one token per row. In a causal LM the
    whole cache depends on the row's prefix, so :meth:`reorder` and :meth:`select` are the same operation.
    """

    def __init__(self, generator: CausalLMGenerator, cache: Cache, attention_mask: torch.Tensor,
                 first_logits: torch.Tensor):
        self.generator = generator
        self.cache = cache
        self.attention_mask = attention_mask  # (N, prompt + generated)
        self.first_logits: torch.Tensor | None = first_logits

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.first_logits is not None:
            logits, self.first_logits = self.first_logits, None
            return logits.float()
        positions = self.attention_mask.long().sum(-1, keepdim=True)  # real tokens so far = next position
        self.attention_mask = torch.cat(
            [self.attention_mask, self.attention_mask.new_ones((self.attention_mask.shape[0], 1))], dim=1
        )
        logits, self.cache = self.generator._forward(tokens[:, None], self.attention_mask, positions, self.cache)
        return logits[:, -1, :].float()

    def select(self, index: torch.Tensor) -> None:
        self.cache.reorder_cache(index)  # assigns index_select-ed tensors: the memory's cache is not touched
        self.attention_mask = self.attention_mask.index_select(0, index)
        if self.first_logits is not None:
            self.first_logits = self.first_logits.index_select(0, index)

    def reorder(self, index: torch.Tensor) -> None:
        self.select(index)
