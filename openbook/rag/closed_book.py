"""The closed-book baseline of the paper (Table 1, "Closed Book"): the generator alone, no retrieval.

Lewis et al. compare RAG with a fine-tuned BART that answers from its parameters only. :class:`ClosedBook`
is that model for any openbook generator: its context is the question alone (a seq2seq generator reads
the question; a causal LM a question-only prompt, :data:`CLOSED_BOOK_CHAT_PROMPT` or
:data:`CLOSED_BOOK_PLAIN_PROMPT`), and it has the parts of :class:`~openbook.rag.model.RAG`'s interface
that training and evaluation use: ``loss`` (the plain negative log-likelihood, so ``openbook train
--model closed-book`` trains it), ``ask`` (greedy or beam search, answers without passages) and
``label_logprobs`` (classification). ``k`` is accepted everywhere and ignored.

With one context of probability 1, RAG's marginals are the generator's own distribution, so the loss is
:func:`~openbook.rag.marginal.rag_token_nll` over one "document" (the same label smoothing as RAG) and
decoding is :func:`~openbook.rag.decoding.rag_token_decode` over one row per question.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from openbook.errors import InputError
from openbook.models.generators import Contexts, Generator
from openbook.models.pieces import token_pieces
from openbook.presets import INTERACTIVE
from openbook.rag.answer import Answer, check_decoding_options, check_questions
from openbook.rag.boundary import answer_texts
from openbook.rag.decoding import beam_config_for, rag_token_decode
from openbook.rag.marginal import rag_token_nll

__all__ = ["CLOSED_BOOK_CHAT_PROMPT", "CLOSED_BOOK_PLAIN_PROMPT", "ClosedBook"]

#: The user message of a chat causal LM without a passage (the RAG prompt minus the passage).
CLOSED_BOOK_CHAT_PROMPT = "Question: {question}\nAnswer in a few words."
#: The whole prompt of a plain causal LM; like the RAG prompt it ends with ``Answer:``.
CLOSED_BOOK_PLAIN_PROMPT = "Question: {question}\nAnswer:"


class _NoPassage:
    """The empty passage a causal LM's prompt is rendered with (its template has no passage fields)."""

    title = ""
    text = ""


class ClosedBook(nn.Module):
    """The generator p_theta(y|x) on its own (the paper's closed-book BART baseline)."""

    model_type = "closed-book"

    def __init__(self, generator: Generator, prompt_template: str | None = None):
        super().__init__()
        self.generator = generator
        self.k = None  # no retrieval; evaluation reports record it as such
        if prompt_template is None and not generator.is_seq2seq:
            chat = getattr(generator, "use_chat_template", False)
            prompt_template = CLOSED_BOOK_CHAT_PROMPT if chat else CLOSED_BOOK_PLAIN_PROMPT
        if prompt_template is not None and "{question}" not in prompt_template:
            raise InputError(f"a closed-book prompt must contain {{question}}: {prompt_template!r}")
        self.prompt_template = prompt_template

    # ------------------------------------------------------------------------------ contexts

    def contexts(self, questions: Sequence[str]) -> Contexts:
        """One generator input per question, without any passage (``n_docs = 1``)."""
        gen = self.generator
        if gen.is_seq2seq:
            strings = [(gen.prefix + q).replace("  ", " ") for q in questions]
            enc = gen.tokenizer(strings, max_length=gen.max_context_length, truncation=True, padding="longest",
                                return_tensors="pt")
            return Contexts(enc["input_ids"], enc["attention_mask"], 1)
        # A causal LM renders prompts with its own template (chat or plain, left padding, BOS): a shallow
        # copy with the question-only template shares the weights and leaves the generator untouched.
        prompter = copy.copy(gen)
        prompter.prompt_template = self.prompt_template
        return prompter.contexts(questions, [[_NoPassage()] for _ in questions])

    def _memory(self, questions: Sequence[str]):
        questions = check_questions(questions)
        return questions, self.generator.encode(self.contexts(questions))

    # ------------------------------------------------------------------------------ training

    def loss(self, questions: Sequence[str], answers: Sequence[str], k: int | None = None, epsilon: float = 0.0,
             max_target_length: int | None = 64) -> torch.Tensor:
        """Mean negative log-likelihood -log p(y|x) of the answers (``k`` is ignored)."""
        questions, memory = self._memory(questions)
        if len(answers) != len(questions):
            raise InputError(f"{len(questions)} questions but {len(answers)} answers")
        targets, mask = self.generator.encode_targets(list(answers), max_target_length)
        B = len(questions)
        lp = self.generator.target_logprobs(memory, torch.arange(B, device=targets.device), targets)  # (B, T, V)
        one_doc = torch.zeros((B, 1), dtype=lp.dtype, device=lp.device)
        return rag_token_nll(lp[:, None], one_doc, targets, mask, epsilon=epsilon).mean()

    def label_logprobs(self, questions: Sequence[str], labels: Sequence[str], k: int | None = None) -> torch.Tensor:
        """log p(label|x) of each one-token label -> ``(B, L)`` (as :meth:`RAG.label_logprobs`, no retrieval)."""
        if isinstance(labels, str) or not labels:
            raise InputError(f"labels must be a non-empty list of strings, got {labels!r}")
        gen = self.generator
        ids: list[int] = []
        for label in labels:
            if not isinstance(label, str) or not label.strip():
                raise InputError(f"a label must be a non-empty string, got {label!r}")
            targets, mask = gen.encode_targets([label])
            row = targets[0, : int(mask[0].sum()) - 1].tolist()  # without the EOS
            unknown = row == [getattr(gen.tokenizer, "unk_token_id", None)]
            if len(row) != 1 or unknown or row[0] in ids:
                raise InputError(f"label {label!r} is not one token of its own for the generator's tokenizer "
                                 f"(ids {row}); classification labels must be distinct single tokens")
            ids.append(row[0])
        questions, memory = self._memory(questions)
        prefix = [] if gen.forced_bos_token_id is None else [int(gen.forced_bos_token_id)]
        device = memory.attention_mask.device
        targets = torch.tensor([prefix + [ids[0]]], dtype=torch.long, device=device).repeat(len(questions), 1)
        lp = gen.target_logprobs(memory, torch.arange(len(questions), device=device), targets)  # (B, T, V)
        return lp[:, -1, ids]

    # ------------------------------------------------------------------------------ decoding

    @torch.no_grad()
    def ask(self, questions: Sequence[str], k: int | None = None, num_beams: int = INTERACTIVE.num_beams,
            decoding: str = INTERACTIVE.decoding, max_new_tokens: int = INTERACTIVE.max_new_tokens,
            min_new_tokens: int = 0, length_penalty: float = 1.0, n_best: int = 1,
            early_stopping: bool | str = False, abstain: bool = INTERACTIVE.abstain,
            abstain_threshold: float | None = None) -> list[Answer]:
        """Answer each question from the generator's parameters alone: greedy (``num_beams=1``) or beam
        search, options as in :meth:`RAG.ask`; ``k``, ``decoding`` (a RAG-Sequence option) and the abstention
        options (with no passages there is nothing to judge the book by) are accepted and ignored. The answers have no passages; ``n_best > 1`` fills ``alternatives``."""
        check_decoding_options(decoding, num_beams, max_new_tokens, min_new_tokens, length_penalty, n_best)
        questions, memory = self._memory(questions)
        cfg = beam_config_for(self.generator, num_beams=num_beams, max_length=max_new_tokens + 1,
                              min_length=min_new_tokens + 1 if min_new_tokens else 0,
                              length_penalty=length_penalty, num_return_sequences=n_best,
                              early_stopping=early_stopping)
        one_doc = torch.zeros((len(questions), 1), device=memory.attention_mask.device)
        decoded = rag_token_decode(self.generator, memory, one_doc, cfg)
        best = decoded.tokens[:, 0]
        texts, truncated = answer_texts(self.generator, best, max_new_tokens)
        tokenizer = self.generator.tokenizer
        answers = []
        for b, question in enumerate(questions):
            row = [t for t in best[b].tolist() if t != self.generator.pad_token_id]
            answers.append(Answer(
                question, texts[b], self.model_type, [],
                tokens=tokenizer.convert_ids_to_tokens(row) if tokenizer is not None else [],
                token_texts=token_pieces(tokenizer, row) if tokenizer is not None else [],
                alternatives=answer_texts(self.generator, decoded.tokens[b, 1:], max_new_tokens)[0],
                truncated=truncated[b],
            ))
        return answers
