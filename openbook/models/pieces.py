"""The readable text of each generated token, for people (the web page's heat map, streamed tokens).

A tokenizer's own pieces are not text: byte-level BPE writes a leading space as "Ġ" ("ĠBard"), SentencePiece
as "▁", and one character may span several byte tokens. :func:`token_pieces` gives the text each token adds
to the decoded string instead, so that the pieces concatenate to exactly what ``tokenizer.decode`` returns;
a token that ends inside a multi-byte character adds "" and the character appears with the token that
completes it. ``Answer.tokens`` keeps the tokenizer's pieces (they map back to ids).
"""

from __future__ import annotations

from collections.abc import Sequence

_INCOMPLETE = "\ufffd"  # what decoding prints for the first bytes of a character whose last bytes are missing


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """The text each of ``ids`` adds to ``tokenizer.decode(ids)``, one string per id."""
    pieces: list[str] = []
    previous = ""
    for end in range(1, len(ids) + 1):
        text = _decode(tokenizer, ids[:end])
        if text.endswith(_INCOMPLETE) and end < len(ids):
            pieces.append("")
            continue
        if text.startswith(previous):
            pieces.append(text[len(previous):])
        else:  # decoding rewrote earlier text (a tokenizer's clean-up): show this token on its own
            pieces.append(_decode(tokenizer, ids[end - 1: end]))
        previous = text
    return pieces
