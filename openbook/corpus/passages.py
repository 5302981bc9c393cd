"""The unit of retrieval: one passage of a knowledge source."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Passage:
    """One retrievable passage z: a chunk of at most ~100 words of an article, with the article title.

    ``id`` is a stable string that names where the passage comes from (for example ``"vital:123#2"``);
    it is informational and need not be unique. ``title`` may be ``""`` when the source has none.
    """

    id: str
    title: str
    text: str
