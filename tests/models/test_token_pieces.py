"""token_pieces: the readable text of each generated token (the web page's heat map labels)."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from openbook.models.pieces import token_pieces


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A small byte-level BPE (GPT-2 / SmolLM2 style: a leading space is written 'Ġ', characters are bytes)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["Wilhelm Röntgen won the first Nobel Prize", "John Bardeen won it twice"] * 5,
                            trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")


def test_pieces_join_to_the_decoded_text_without_tokenizer_markers():
    tok = byte_level_tokenizer()
    text = " Wilhelm Röntgen, 東京 and John Bardeen"  # unseen multi-byte characters fall apart into bytes
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    raw = tok.convert_ids_to_tokens(ids)
    assert any(t.startswith("Ġ") for t in raw)  # what the heat map showed before
    pieces = token_pieces(tok, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=False) == text + "<|im_end|>"
    assert not any("Ġ" in p or "\ufffd" in p for p in pieces)
    assert pieces[-1] == "<|im_end|>"
    # a character split over byte tokens appears once, with the token that completes it
    assert sum(p.count("東") for p in pieces) == 1 and sum(p.count("ö") for p in pieces) == 1


def test_no_tokens_no_pieces():
    assert token_pieces(byte_level_tokenizer(), []) == []
