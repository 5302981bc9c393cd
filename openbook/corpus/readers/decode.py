"""Bytes to text in any common encoding: UTF-8 first, else the encoding charset-normalizer detects.

Binary data (NUL bytes without a UTF-16/32 byte-order mark, or text full of control characters) is
refused, so that a binary file with a text suffix is named instead of indexed as noise.
"""

from openbook.corpus.readers.document import FileProblem

# The most common legacy encodings first: several single-byte code pages decode the same bytes to the same
# text, and charset-normalizer's own name for the group is arbitrary (cp1250 for a French cp1252 file).
_PREFERRED = ("utf_8", "cp1252", "latin_1", "iso8859_15", "cp1250", "cp1251")
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_ALLOWED_CONTROLS = set("\t\n\r\f\v")


def decode_text(data: bytes) -> tuple[str, str]:
    """``(text, encoding)`` of ``data`` (encoding as Python names it, e.g. ``"utf_8"`` or ``"cp1252"``).

    Raises :class:`FileProblem` for binary data or bytes that are text in no common encoding.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return _checked(data.decode("utf-8")), "utf_8"
    except UnicodeDecodeError:
        pass
    if b"\x00" in data and not data.startswith(_BOMS):
        raise FileProblem("binary", "binary data, not text (it has NUL bytes)")
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        raise FileProblem("binary", "binary data, not text in any common encoding")
    least = min(m.chaos for m in matches)
    tied = [m for m in matches if m.chaos <= least + 0.01]
    for name in _PREFERRED:  # each match also names the encodings that decode these bytes the same way
        for match in tied:
            if name in (match.could_be_from_charset or [match.encoding]):
                return _checked(data.decode(name)), name
    match = from_bytes(data).best() or matches[0]
    return _checked(str(match)), match.encoding


def _checked(text: str) -> str:
    """``text`` unless more than 1% of it are control characters (binary data that happens to decode)."""
    if "\x00" in text:
        raise FileProblem("binary", "binary data, not text (it has NUL bytes)")
    controls = sum(1 for ch in text if ch < " " and ch not in _ALLOWED_CONTROLS)
    if controls and controls * 100 > len(text):
        raise FileProblem("binary", f"binary data, not text ({controls} control characters)")
    return text
