"""Plain text or Markdown files (``.txt``, ``.md``, ``.markdown``), alone or as a folder searched recursively.

Hidden files are skipped and files are read in sorted path order. The title is the first Markdown
heading (that line is then left out of the text) or else the file name without its suffix. A text
file's base id is ``"<folder name>/<relative path>"`` (or its file name when given alone).
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path

from openbook.corpus.readers.files import _strip_gz
from openbook.corpus.readers.records import RecordErrors, SourcePassage, _record_passages

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_MARKDOWN_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


def _text_file_title_text(path: Path, content: str) -> tuple[str, str]:
    """Title and text of a text file: the first Markdown heading (removed from the text) or the stem."""
    if _strip_gz(path.name).lower().endswith((".md", ".markdown")):
        lines = content.splitlines()
        for i, line in enumerate(lines):
            match = _MARKDOWN_HEADING.match(line)
            if match and match.group(1).strip():
                return match.group(1).strip(), "\n".join(lines[:i] + lines[i + 1:])
    return path.stem, content


def _text_passages(path: Path, base_id: str, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    where = f"{path}:1"
    try:
        content = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        errors(f"{path}:{content_line(path, exc.start)}", "not UTF-8 text")
        return
    except OSError as exc:
        errors(where, f"cannot read: {exc.strerror or exc}")
        return
    title, text = _text_file_title_text(path, content.lstrip("\ufeff"))
    record = {"id": base_id, "title": title, "text": text}
    yield from _record_passages(record, base_id, where, max_words, errors)


def content_line(path: Path, offset: int) -> int:
    """1-based line number of byte ``offset`` of ``path``."""
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n") + 1


def _text_file_source(path: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    yield from _text_passages(path, path.name, max_words, errors)


def _folder_source(folder: Path, max_words: int, errors: RecordErrors) -> Iterator[SourcePassage]:
    name = folder.resolve().name or "corpus"
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for file_name in names:
            if not file_name.startswith(".") and file_name.lower().endswith(TEXT_SUFFIXES):
                path = Path(root, file_name)
                files.append((path.relative_to(folder).as_posix(), path))
    for relative, path in sorted(files):
        yield from _text_passages(path, f"{name}/{relative}", max_words, errors)
