"""Markdown rendered to plain text with markdown-it-py (CommonMark and tables).

The first heading is the document's title; every other heading starts a section (see
:func:`~openbook.corpus.readers.document.sectioned`: its title is the heading path, ``"Setup > Install"``)
and leaves the text. The markup goes: ``#`` marks, code fences (their code stays), emphasis, links (their
text stays), HTML blocks and table rules. A table row becomes ``header: cell; header: cell``, so its cells stay readable.
"""

from openbook.corpus.readers.document import Document, Heading, sectioned


def render_markdown(source: str, default_title: str) -> Document:
    """The title (first heading, else ``default_title``) and rendered sections of Markdown ``source``."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    blocks: list[str | Heading] = []
    title = None
    level = 0
    header: list[str] = []
    row: list[str] = []
    in_heading = in_head_row = in_cell = False
    for token in tokens:
        kind = token.type
        if kind == "heading_open":
            in_heading, level = True, int(token.tag[1:])
        elif kind == "heading_close":
            in_heading = False
        elif kind == "thead_open":
            in_head_row, header = True, []
        elif kind == "thead_close":
            in_head_row = False
        elif kind in ("th_open", "td_open"):
            in_cell = True
        elif kind in ("th_close", "td_close"):
            in_cell = False
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and not in_head_row:
            pairs = [f"{name}: {cell}" if name else cell for name, cell in zip(header + [""] * len(row), row) if cell]
            blocks.append("; ".join(pairs))
        elif kind == "inline":
            text = _inline_text(token)
            if in_heading:
                title = title or " ".join(text.split())
                blocks.append(Heading(level, text))
            elif in_cell:
                (header if in_head_row else row).append(text)
            elif text:
                blocks.append(text)
        elif kind in ("fence", "code_block") and token.content.strip():
            blocks.append(token.content.rstrip("\n"))
    title = title or default_title
    return Document(title, sectioned(title, blocks))


def _inline_text(token) -> str:
    parts = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)  # its alt text
    return "".join(parts).strip()
