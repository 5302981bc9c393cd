"""Answer text from generated tokens, cut back to a sensible boundary when the token limit cut it.

Decoding stops either because the generator wrote EOS (the answer is what it meant to say, left alone)
or because ``max_new_tokens`` ran out: then the last word, or a number, may be cut in the middle
("... who received 150,"). :func:`trim_truncated` keeps the end of the last complete sentence if there
is one, else the words known to be whole (every word but the last: the next token might have continued
it), never a partial number or an unclosed bracket, and without trailing commas, colons or dashes.
:func:`answer_texts` applies it to exactly the rows that hit the limit and says which those were.
"""

from __future__ import annotations

import re

import torch

__all__ = ["answer_texts", "hit_limit", "trim_truncated"]

_CLOSERS = "\"'”’)]»"
# A sentence ends at . ! ? (and any closing quotes or brackets) followed by whitespace, or at the text's end.
_SENTENCE_END = re.compile(rf"[.!?…][{re.escape(_CLOSERS)}]*(?=\s|$)")
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "vs", "etc", "no", "vol", "inc", "ltd", "co",
                  "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "e.g", "i.e",
                  "u.s", "u.k", "c", "ca"}
_TRAILING = " \t\n,;:-–—/([{\"'“‘«"
# Words that cannot end an answer cut short: what they introduce was cut off ("awarded in 1901 to").
_DANGLING = {"a", "an", "the", "to", "of", "in", "on", "at", "by", "for", "with", "from", "into", "and", "or", "but",
             "nor", "as", "than", "that", "which", "who", "whom", "whose", "where", "when", "is", "was", "were", "are",
             "be", "been", "his", "her", "its", "their"}


def _is_sentence_end(text: str, match: re.Match) -> bool:
    """Whether the terminator at ``match`` ends a sentence: not an abbreviation or an initial ("Dr.",
    "J. R. R."), and at the very end of the text not a digit's point, which may be a decimal's ("3.")."""
    if text[match.start()] != ".":
        return True
    word = re.search(r"[\w.]*$", text[: match.start()]).group(0)
    if not word or word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False
    return not (match.end() == len(text) and word[-1].isdigit())


def _unclosed_bracket(text: str) -> int | None:
    """Where the first bracket that is never closed opens, or None."""
    stack: list[int] = []
    pairs = {")": "(", "]": "["}
    for i, char in enumerate(text):
        if char in "([":
            stack.append(i)
        elif char in pairs and stack and text[stack[-1]] == pairs[char]:
            stack.pop()
    return stack[0] if stack else None


def trim_truncated(text: str) -> str:
    """The text of an answer that the token limit cut, ended at a sensible boundary.

    The end of the last complete sentence if there is one; else every word but the last (the cut may
    have split it, or a number such as "150,000" or "1.5"), cut before a bracket it never closes, with
    trailing commas, colons, dashes and open quotes stripped, and words that only lead into what was
    cut off ("to", "the", "and", "who" ...). A single word (nothing whole before it)
    is kept, without its trailing punctuation."""
    text = text.strip()
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if _is_sentence_end(text, m)]
    if ends:
        return text[: ends[-1]]
    words = text.split()
    if len(words) <= 1:
        return text.rstrip(_TRAILING + ".") or text
    kept = text[: text.rstrip().rfind(words[-1])]
    bracket = _unclosed_bracket(kept)
    if bracket is not None and kept[:bracket].strip():
        kept = kept[:bracket]
    kept = kept.rstrip(_TRAILING)
    while " " in kept and kept.rsplit(" ", 1)[1].lower() in _DANGLING:
        kept = kept.rsplit(" ", 1)[0].rstrip(_TRAILING)
    return kept or words[0].rstrip(_TRAILING + ".")


def hit_limit(row: list[int], max_new_tokens: int, eos_token_id: int | None, pad_token_id: int | None,
              forced_eos: bool = False) -> bool:
    """Whether decoding stopped this answer row (tokens after the start token) at ``max_new_tokens``
    rather than at EOS: no EOS among its tokens and the limit reached (pads that are also EOS ended it
    early), or an EOS that a generation config forced into the last place (``forced_eos``)."""
    tokens = [t for t in row if t != pad_token_id or t == eos_token_id]
    if eos_token_id is not None and eos_token_id in tokens:
        return forced_eos and tokens.index(eos_token_id) == max_new_tokens - 1
    return len(tokens) >= max_new_tokens


def answer_texts(generator, tokens: torch.Tensor, max_new_tokens: int) -> tuple[list[str], list[bool]]:
    """``tokens (N, T)`` answer rows (no start token) -> their texts and whether each hit the token limit;
    the texts of those that did are cut back with :func:`trim_truncated`."""
    texts = generator.decode_tokens(tokens)
    forced = generator.forced_eos_token_id is not None
    truncated = [hit_limit(row, max_new_tokens, generator.eos_token_id, generator.pad_token_id, forced)
                 for row in tokens.tolist()]
    return [trim_truncated(t) if cut else t for t, cut in zip(texts, truncated)], truncated
