"""HTML (``.html``, ``.htm``, ``.xhtml``; needs ``openbook[docs]``): the main content, read with trafilatura.

Navigation, scripts, styles, headers, footers and comments are dropped; headings stay as lines of their
own and tables as text. The title is the page's own (its ``<title>`` or main heading), else the file
name. A page too small for trafilatura's main-content heuristics (a fragment) keeps all its text, scripts
and styles still dropped. Files above ``MAX_BYTES["html"]`` are refused before parsing.
"""

from pathlib import Path

from openbook.corpus.readers.document import Document, FileProblem, Part, need, read_bytes

HTML_SUFFIXES = (".html", ".htm", ".xhtml")


def read_html(path: Path) -> Document:
    data = read_bytes(path, "html")
    trafilatura = need("trafilatura", "HTML files")
    need("lxml_html_clean", "HTML files")
    if not data.strip():
        raise FileProblem("empty", "empty file")
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise FileProblem("binary", "binary data, not HTML (it has NUL bytes)")
    text = trafilatura.extract(data, include_comments=False, include_tables=True, favor_recall=True)
    if not text or not text.strip():  # too little for its main-content heuristics (a fragment): all the text
        text = trafilatura.html2txt(data, clean=True)
    if not text or not text.strip():
        raise FileProblem("empty", "no text found in the page's main content")
    metadata = trafilatura.extract_metadata(data)
    title = (metadata.title if metadata is not None else None) or path.stem
    return Document(title.strip(), [Part(text)])
