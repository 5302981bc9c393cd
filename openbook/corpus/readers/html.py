"""HTML (``.html``, ``.htm``, ``.xhtml``; needs ``openbook[docs]``): the main content, read with trafilatura.

Navigation, scripts, styles, headers, footers and comments are dropped; tables stay as text. The main
content is taken as trafilatura's XML, whose ``h1``-``h6`` headings (``<head rend="h2">``) split it into
sections (:func:`~openbook.corpus.readers.document.sectioned`); the text of each is trafilatura's own
plain-text rendering. The title is the page's own (its ``<title>`` or main heading), else the file name. A
page too small for trafilatura's main-content heuristics (a fragment) keeps all its text, scripts and
styles still dropped, in one part. Files above ``MAX_BYTES["html"]`` are refused before parsing.
"""

import re
import uuid
from pathlib import Path

from openbook.corpus.readers.document import Document, FileProblem, Heading, Part, need, read_bytes, sectioned

HTML_SUFFIXES = (".html", ".htm", ".xhtml")


def read_html(path: Path) -> Document:
    data = read_bytes(path, "html")
    trafilatura = need("trafilatura", "HTML files")
    need("lxml_html_clean", "HTML files")
    if not data.strip():
        raise FileProblem("empty", "empty file")
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise FileProblem("binary", "binary data, not HTML (it has NUL bytes)")
    metadata = trafilatura.extract_metadata(data)
    title = ((metadata.title if metadata is not None else None) or path.stem).strip()
    xml = trafilatura.extract(data, output_format="xml", include_comments=False, include_tables=True,
                              favor_recall=True)
    parts = _sections(xml, title) if xml else []
    if not any(part.text for part in parts):  # too little for its main-content heuristics (a fragment): all the text
        text = trafilatura.html2txt(data, clean=True)
        parts = [Part(text.strip())] if text and text.strip() else []
    if not parts:
        raise FileProblem("empty", "no text found in the page's main content")
    return Document(title, parts)


def _sections(xml: str, title: str) -> list[Part]:
    """The sections of trafilatura's XML output: each top-level heading (one not inside a table cell or
    list item) is swapped for a marker paragraph, the whole rendered as trafilatura renders text, and the
    text cut at the markers."""
    etree = need("lxml.etree", "HTML files")
    xmltotxt = need("trafilatura.xml", "HTML files").xmltotxt
    root = etree.fromstring(xml.encode("utf-8"), parser=etree.XMLParser(resolve_entities=False, no_network=True))
    main = root.find("main")
    if main is None:
        return []
    marker = f"openbookheading{uuid.uuid4().hex}"
    headings: list[Heading] = []
    for head in list(main.iter("head")):
        if any(a.tag in ("cell", "item") for a in head.iterancestors()):
            continue
        rend = head.get("rend") or ""
        level = int(rend[1]) if re.fullmatch(r"h[1-6]", rend) else 2
        headings.append(Heading(level, " ".join("".join(head.itertext()).split())))
        tail = head.tail
        head.clear()
        head.tag, head.text, head.tail = "p", f"{marker}{len(headings) - 1}{marker}", tail
    pieces = re.split(rf"{marker}(\d+){marker}", xmltotxt(main, False))
    blocks: list[str | Heading] = [pieces[0]]
    for number, text in zip(pieces[1::2], pieces[2::2]):
        blocks += [headings[int(number)], text]
    return sectioned(title, blocks)
