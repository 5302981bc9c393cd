"""The unit of retrieval: one passage of a knowledge source."""

from dataclasses import dataclass, field
from typing import Union

MetaValue = Union[str, int, float, bool]
"""A metadata value: JSON scalars only, so that it can be stored, filtered on and returned as it is."""


@dataclass(frozen=True)
class Passage:
    """One retrievable passage z: a chunk of at most ~100 words of an article, with the article title.

    ``id`` is a stable string that names where the passage comes from (for example ``"vital:123#2"``);
    it is informational and need not be unique. ``title`` may be ``""`` when the source has none.
    ``meta`` is the passage's metadata (None when it has none): its document's ``source`` (the document
    id), ``type``, ``page``, ``section``, ``modified`` (ISO 8601) and any fields a user asked to keep.
    """

    id: str
    title: str
    text: str
    meta: dict[str, MetaValue] | None = field(default=None, hash=False)
