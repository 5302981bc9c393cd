"""Tiny random models and tokenizers for fast tests (no downloads)."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    DPRConfig,
    DPRQuestionEncoder,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

from openbook.corpus import Passage
from openbook.models.encoders import Encoder

WORDS = (
    "the a of in is was who what when where which first nobel prize physics paris france capital river "
    "city born wrote novel author president peru country king queen war year sun rises farewell arms "
    "hemingway ernest american literature europe largest ocean pacific atlantic mountain everest music"
).split()

#: Six short passages the tiny RAG tests retrieve from (tests/rag/test_rag_model.py, tests/helpers/ddp_worker.py).
PASSAGES = [
    Passage("p0", "Paris", "paris is the capital of france"),
    Passage("p1", "Hemingway", "ernest hemingway wrote the sun rises"),
    Passage("p2", "Nobel", "the first nobel prize in physics"),
    Passage("p3", "Everest", "everest is the largest mountain"),
    Passage("p4", "Pacific", "the pacific is the largest ocean"),
    Passage("p5", "Peru", "the president of peru"),
]


def word_tokenizer(specials: tuple[str, ...], extra_words: int = 0) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer whose first ids are ``specials`` (in order)."""
    vocab = {tok: i for i, tok in enumerate(specials)}
    for w in WORDS + [f"w{i}" for i in range(extra_words)] + ["/", "//", ".", "?", ","]:
        vocab.setdefault(w, len(vocab))
    unk = "<unk>" if "<unk>" in vocab else specials[-1]
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk)


def bart_tokenizer() -> PreTrainedTokenizerFast:
    tok = word_tokenizer(("<s>", "<pad>", "</s>", "<unk>"))
    tok.add_special_tokens({"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>"})
    tok._tokenizer.post_processor = _wrap("<s>", 0, "</s>", 2)
    return tok


def t5_tokenizer() -> PreTrainedTokenizerFast:
    tok = word_tokenizer(("<pad>", "</s>", "<unk>"))
    tok.add_special_tokens({"pad_token": "<pad>", "eos_token": "</s>"})
    return tok


def bert_tokenizer() -> PreTrainedTokenizerFast:
    tok = word_tokenizer(("[PAD]", "[UNK]", "[CLS]", "[SEP]"))
    tok.add_special_tokens({"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]"})
    tok._tokenizer.post_processor = _wrap("[CLS]", 2, "[SEP]", 3)
    return tok


def _wrap(first: str, first_id: int, last: str, last_id: int):
    from tokenizers import processors

    return processors.TemplateProcessing(
        single=f"{first} $A {last}", pair=f"{first} $A {last} $B {last}",
        special_tokens=[(first, first_id), (last, last_id)],
    )


def tiny_bart(vocab_size: int = 128, seed: int = 0, init_std: float = 0.5, d_model: int = 16, layers: int = 2,
              **kw) -> BartForConditionalGeneration:
    """A random BART whose outputs depend on its input (a large init keeps them from collapsing)."""
    torch.manual_seed(seed)
    config = BartConfig(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model, max_position_embeddings=512, init_std=init_std, **kw,
    )
    return BartForConditionalGeneration(config).eval()


def tiny_t5(vocab_size: int = 128, seed: int = 0) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=vocab_size, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        decoder_start_token_id=0, initializer_factor=4.0,
    )
    model = T5ForConditionalGeneration(config).eval()
    # T5 has no BOS; transformers' RAG-Sequence loss reads config.bos_token_id, absent from T5Config in 5.x
    model.config.bos_token_id = None
    return model


def tiny_dpr(vocab_size: int = 128, seed: int = 0) -> DPRQuestionEncoder:
    torch.manual_seed(seed)
    config = DPRConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=512)
    return DPRQuestionEncoder(config).eval()


def tiny_encoder(seed: int = 0, normalize: bool = True) -> Encoder:
    torch.manual_seed(seed)
    tok = bert_tokenizer()
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    return Encoder(BertModel(config).eval(), tok, pooling="mean", normalize=normalize, name=f"tiny-bert-{seed}")


def tiny_parts(root):
    """A tiny query encoder, a knowledge base of the six PASSAGES built with it under ``root``, and a tiny BART."""
    from openbook.models.generators import Seq2SeqGenerator
    from openbook.rag.assemble import build_knowledge_base

    encoder = tiny_encoder()
    kb = build_knowledge_base(PASSAGES, encoder, root / "kb", progress=False)
    tok = bart_tokenizer()
    return encoder, kb, Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
