"""Split article text into disjoint word chunks, as the RAG paper does for Wikipedia.

Lewis et al. (2020): "Each Wikipedia article is split into disjoint 100-word chunks". Words are the
whitespace-separated tokens of the text; a chunk is those words joined by single spaces, so chunking
also normalises runs of whitespace and newlines.
"""

from openbook.corpus.passages import Passage
from openbook.errors import positive_int

DEFAULT_MAX_WORDS = 100


def check_max_words(max_words: int) -> None:
    """Raise InputError unless ``max_words`` is a positive integer."""
    positive_int(max_words, "max_words")


def split_words(text: str, max_words: int = DEFAULT_MAX_WORDS) -> list[str]:
    """Split ``text`` into disjoint consecutive chunks of at most ``max_words`` words.

    Every word appears in exactly one chunk, in order; only the last chunk may be shorter.
    Empty or whitespace-only text gives ``[]``.
    """
    check_max_words(max_words)
    words = text.split()
    return [" ".join(words[start:start + max_words]) for start in range(0, len(words), max_words)]


def chunk_article(
    title: str, text: str, max_words: int = DEFAULT_MAX_WORDS, id_prefix: str = ""
) -> list[Passage]:
    """Split one article into passages that all keep the article ``title``.

    The i-th chunk (0-based) gets the id ``f"{id_prefix}{i}"``.
    """
    return [
        Passage(id=f"{id_prefix}{i}", title=title, text=chunk)
        for i, chunk in enumerate(split_words(text, max_words))
    ]
