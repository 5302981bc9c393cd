"""Passages that respect a document's structure: disjoint word chunks as before, but never across a section
(Markdown, HTML and DOCX headings) or a page (PDF), each titled "Document > Section" with a stable id."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbook.corpus import SourceReport, iter_source_passages
from openbook.corpus.readers.document import Heading, Part, sectioned

SETUP = "alpha bravo charlie delta echo foxtrot golf"  # 7 words
INSTALL = "hotel india juliet"  # a tiny section: its own passage, never merged
USE = "kilo lima mike november oscar papa quebec romeo"  # 8 words


def read(path: Path, max_words: int = 5):
    report = SourceReport()
    passages = [item.passage for item in iter_source_passages([path], max_words, report=report)]
    assert not report.skipped, report.skipped
    return passages


def assert_within_sections(passages, sections: dict[str, str]) -> None:
    """Every passage's words all come from the one section its title names, and every word is kept."""
    for passage in passages:
        section = passage.title.split(" > ", 1)[1] if " > " in passage.title else ""
        assert set(passage.text.split()) <= set(sections[section].split()), passage
    assert sorted(w for p in passages for w in p.text.split()) == sorted(w for t in sections.values() for w in t.split())


def test_sections_split_at_headings_with_heading_paths():
    parts = sectioned("Guide", ["before", Heading(1, "Guide"), "intro", Heading(2, "Setup"), "s",
                                Heading(3, "Install"), "i", Heading(2, " "), Heading(2, "Use"), "u",
                                Heading(1, "Guide"), "again"])
    assert parts == [Part("before\n\nintro"), Part("s", section="Setup"), Part("i", section="Setup > Install"),
                     Part("u", section="Use"), Part("again", section="Guide")]  # the title names the document once


def test_markdown_passages_stay_within_their_sections(tmp_path):
    note = tmp_path / "guide.md"
    note.write_text(f"# Guide\n\nIntro words.\n\n## Setup\n\n{SETUP}\n\n### Install\n\n{INSTALL}\n\n## Use\n\n{USE}\n",
                    encoding="utf-8")
    passages = read(note)
    assert [(p.id, p.title) for p in passages] == [
        ("guide.md", "Guide"),  # the text before the first section belongs to the document title alone
        ("guide.md:s1#0", "Guide > Setup"), ("guide.md:s1#1", "Guide > Setup"),
        ("guide.md:s2", "Guide > Setup > Install"),
        ("guide.md:s3#0", "Guide > Use"), ("guide.md:s3#1", "Guide > Use"),
    ]
    assert_within_sections(passages, {"": "Intro words.", "Setup": SETUP, "Setup > Install": INSTALL, "Use": USE})
    assert [p.meta["section"] for p in passages[1:]] == ["Setup", "Setup", "Setup > Install", "Use", "Use"]
    assert "section" not in passages[0].meta
    assert read(note) == passages  # the same file, the same ids


def test_html_passages_stay_within_their_headings(tmp_path):
    pytest.importorskip("trafilatura")
    page = tmp_path / "handbook.html"
    page.write_text(
        "<html><head><title>Handbook</title></head><body><nav><a href='/'>Home navigation</a></nav><main>"
        "<h1>Handbook</h1><p>Welcome to the handbook of the company, read it all.</p>"
        f"<h2>Setup</h2><p>{SETUP}</p><h3>Install</h3><p>{INSTALL}</p><h2>Use</h2><p>{USE}</p>"
        "</main><footer>footer text</footer></body></html>", encoding="utf-8")
    passages = read(page, max_words=6)
    assert [p.title for p in passages] == ["Handbook", "Handbook", "Handbook > Setup", "Handbook > Setup",
                                           "Handbook > Setup > Install", "Handbook > Use", "Handbook > Use"]
    assert [p.id for p in passages][2:] == ["handbook.html:s1#0", "handbook.html:s1#1", "handbook.html:s2",
                                            "handbook.html:s3#0", "handbook.html:s3#1"]
    assert_within_sections(passages, {"": "Welcome to the handbook of the company, read it all.", "Setup": SETUP,
                                      "Setup > Install": INSTALL, "Use": USE})


def test_docx_passages_stay_within_heading_styled_paragraphs(tmp_path):
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("Leave policy", level=0)  # the Title style: the title, no core-properties title set
    document.add_paragraph("Read before asking.")
    document.add_heading("Setup", level=1)
    document.add_paragraph(SETUP)
    document.add_heading("Install", level=2)
    document.add_paragraph(INSTALL)
    document.add_heading("Use", level=1)
    document.add_paragraph(USE)
    path = tmp_path / "leave.docx"
    document.save(path)
    passages = read(path)
    assert [(p.id, p.title) for p in passages] == [
        ("leave.docx", "Leave policy"),
        ("leave.docx:s1#0", "Leave policy > Setup"), ("leave.docx:s1#1", "Leave policy > Setup"),
        ("leave.docx:s2", "Leave policy > Setup > Install"),
        ("leave.docx:s3#0", "Leave policy > Use"), ("leave.docx:s3#1", "Leave policy > Use"),
    ]
    assert_within_sections(passages, {"": "Read before asking.", "Setup": SETUP, "Setup > Install": INSTALL,
                                      "Use": USE})


def test_pdf_passages_stay_within_their_pages(docs, tmp_path):
    pytest.importorskip("pypdf")
    pdf = tmp_path / "guide.pdf"
    pdf.write_bytes(docs.make_pdf([SETUP, INSTALL]))
    passages = read(pdf)
    assert [(p.id, p.title, p.meta["page"]) for p in passages] == [
        ("guide.pdf:page1#0", "guide > page 1", 1), ("guide.pdf:page1#1", "guide > page 1", 1),
        ("guide.pdf:page2", "guide > page 2", 2),
    ]
    assert_within_sections(passages, {"page 1": SETUP, "page 2": INSTALL})


def test_a_document_without_headings_keeps_its_one_id(tmp_path):
    note = tmp_path / "plain.md"
    note.write_text("Just words, no heading at all.\n", encoding="utf-8")
    (passage,) = read(note, max_words=100)
    assert (passage.id, passage.title) == ("plain.md", "plain")
