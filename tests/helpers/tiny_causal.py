"""A tiny random Llama and a word-level tokenizer (with a chat template) for the causal generator's tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from openbook.models.causal import CausalLMGenerator

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"]
WORDS = (
    "Title Passage Question Answer : . , ? ( ) the a of in is was who what where when which city capital "
    "france paris germany berlin river seine flows through born year poet wrote play rome italy "
    "answer using passage reply with short only few words user assistant system you are helpful "
    "one two three four five six seven eight nine ten long filler question Reply Berlin France Poet Play Long )."
).split()


@dataclass
class P:
    title: str
    text: str


def make_tokenizer(chat: bool) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(SPECIALS + sorted(set(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def make_model(vocab_size: int, attn: str = "sdpa") -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    config._attn_implementation = attn
    model = LlamaForCausalLM(config)
    model.eval()
    return model


def make_generator(chat: bool = True, attn: str = "sdpa", **kwargs) -> CausalLMGenerator:
    tok = make_tokenizer(chat)
    return CausalLMGenerator(make_model(len(tok), attn), tok, **kwargs)


QUESTIONS = ["what is the capital of france ?", "who wrote the play ?"]
PASSAGES = [
    [P("France", "paris is the capital of france ."), P('"Berlin"', "berlin is the capital city of germany , the river flows through")],
    [P("Poet", "the poet was born in rome"), P("Play", "a short play")],
]
