"""WikiExtractor output as a corpus: folders ``AA``, ``AB`` of ``wiki_NN`` files (plain, gzip, bzip2) of
``<doc>`` records, recognised by content; an article per document, its title the passages' title (the
repeated title line dropped), its page id and url in their metadata; empty articles skipped and counted;
corrupt files named, never fatal to a folder build."""

from __future__ import annotations

import bz2
import gzip
import json
import os
from pathlib import Path

import pytest

from openbook.corpus import RecordErrors, SourceReport, iter_source_passages, source_kind
from openbook.corpus.readers import file_type
from openbook.errors import InputError
from openbook.index import KnowledgeBase
from openbook.index.kb import delete_document, list_documents, sync_documents
from tiny_kb import BowEncoder, encode, run

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "wikipedia-2015-core"
INFO = BowEncoder("fake/bow").info()


def record(page_id: int, title: str, paragraphs: list[str], escaped_title: str | None = None) -> str:
    """One record exactly as WikiExtractor writes it: the header, the title again, a blank line, the text,
    a blank line, ``</doc>`` (the title HTML-escaped in both places)."""
    shown = escaped_title or title
    body = "".join(f"{p}\n" for p in paragraphs)
    return (f'<doc id="{page_id}" url="http://en.wikipedia.org/wiki?curid={page_id}" title="{shown}">\n'
            f"{shown}\n\n{body}\n</doc>\n")


def words(stem: str, n: int) -> str:
    return " ".join(f"{stem}{i}" for i in range(n))


ANARCHISM = record(12, "Anarchism", ["Anarchism is a political philosophy that advocates stateless societies.",
                                     "Etymology and terminology.", words("anarchy", 230)])
AUTISM = record(25, "Autism", ["Autism is a neurodevelopmental disorder characterized by impaired social "
                               "interaction, verbal and non-verbal communication."])
COGENCY = record(5296, "Cogency", [])  # a redirect stub: nothing but its title
BATMAN = record(4729, "Batman & Robin (film)", ["Batman & Robin is a 1997 American superhero film."],
                escaped_title="Batman &amp; Robin (film)")
HELLO = record(13834, '"Hello, World!" program', ['A "Hello, World!" program outputs "Hello, World!".'],
               escaped_title="&quot;Hello, World!&quot; program")


@pytest.fixture
def extracted(tmp_path) -> Path:
    """A tiny WikiExtractor output folder: AA/wiki_00 plain, AA/wiki_01.gz, AB/wiki_00.bz2."""
    root = tmp_path / "extracted"
    (root / "AA").mkdir(parents=True)
    (root / "AB").mkdir()
    (root / "AA" / "wiki_00").write_text(ANARCHISM + AUTISM, encoding="utf-8")
    (root / "AA" / "wiki_01.gz").write_bytes(gzip.compress((COGENCY + BATMAN).encode()))
    (root / "AB" / "wiki_00.bz2").write_bytes(bz2.compress(HELLO.encode()))
    return root


def read(sources, **kwargs):
    report = kwargs.pop("report", SourceReport())
    return list(iter_source_passages([str(s) for s in sources], report=report, **kwargs)), report


def test_wikiextractor_files_are_recognised_by_content(extracted, tmp_path):
    for name in ("AA/wiki_00", "AA/wiki_01.gz", "AB/wiki_00.bz2"):
        assert file_type(extracted / name) == "wikiextractor"
        assert source_kind(extracted / name) == "wikiextractor"
    other = tmp_path / "LICENSE"
    other.write_text("Permission is hereby granted, free of charge\n", encoding="utf-8")
    assert file_type(other) is None
    (tmp_path / "pipe").mkdir()
    os.mkfifo(tmp_path / "pipe" / "wiki_00")  # never opened (it would block)
    assert file_type(tmp_path / "pipe" / "wiki_00") is None


def test_articles_become_titled_passages_with_page_ids(extracted):
    items, report = read([extracted])
    passages = [item.passage for item in items]
    assert [p.id for p in passages] == ["wiki:12#0", "wiki:12#1", "wiki:12#2", "wiki:25", "wiki:4729", "wiki:13834"]
    assert [p.title for p in passages[2:]] == ["Anarchism", "Autism", "Batman & Robin (film)",
                                              '"Hello, World!" program']
    # the title line is dropped; the text is split into the paper's 100-word passages within the article
    assert passages[0].text.startswith("Anarchism is a political philosophy")
    assert passages[3].text.startswith("Autism is a neurodevelopmental")
    assert passages[4].text == "Batman & Robin is a 1997 American superhero film."
    assert all(len(p.text.split()) <= 100 for p in passages)
    assert sum(len(p.text.split()) for p in passages[:3]) == 9 + 3 + 230
    assert passages[0].meta.items() >= {"source": "wiki:12", "type": "wikiextractor", "page_id": "12",
                                        "url": "http://en.wikipedia.org/wiki?curid=12"}.items()
    assert {item.document for item in items} == {"wiki:12", "wiki:25", "wiki:4729", "wiki:13834"}
    assert all(p.meta["source"] == item.document for p, item in zip(passages, items))
    assert items[0].where == f"{extracted / 'AA' / 'wiki_00'}:1" and items[3].where.endswith("wiki_00:9")
    # each article has its own content hash: a changed article changes only its own
    assert len({item.document_sha256 for item in items}) == 4
    assert report.read == {"wikiextractor": 3} and report.empty_records == 1 and not report.skipped
    assert "records with no text skipped: 1" in report.lines()


def test_a_single_file_and_max_words(extracted):
    items, _ = read([extracted / "AA" / "wiki_00"], max_words=50)
    assert [item.passage.id for item in items][:2] == ["wiki:12#0", "wiki:12#1"] and len(items) == 6
    assert items[-1].passage.id == "wiki:25" and items[-1].document == "wiki:25"


def test_the_same_article_has_the_same_hash_wherever_it_is(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "wiki_00").write_text(ANARCHISM + AUTISM, encoding="utf-8")
    (two / "wiki_07.gz").write_bytes(gzip.compress((AUTISM + ANARCHISM.replace("stateless", "free")).encode()))
    first = {item.document: item.document_sha256 for item in read([one])[0]}
    second = {item.document: item.document_sha256 for item in read([two])[0]}
    assert first["wiki:25"] == second["wiki:25"] and first["wiki:12"] != second["wiki:12"]


def test_json_output_and_a_missing_newline_after_doc(tmp_path):
    """``wikiextractor --json`` writes one JSON record per line (no title line in the text); some versions
    write ``</doc>`` with no newline, so that the next record starts on the same line."""
    lines = [json.dumps({"id": "25", "revid": "9", "url": "https://en.wikipedia.org/wiki?curid=25", "title": "Autism",
                         "text": "Autism\nis a neurodevelopmental disorder."}),
             json.dumps({"id": "4729", "revid": "7", "url": "u", "title": "Batman &amp; Robin", "text": "A &amp; B"})]
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "wiki_00").write_text("\n".join(lines) + "\n", encoding="utf-8")
    items, report = read([tmp_path / "json"])
    assert [(i.passage.id, i.passage.title, i.passage.text) for i in items] == [
        ("wiki:25", "Autism", "Autism is a neurodevelopmental disorder."),
        ("wiki:4729", "Batman & Robin", "A & B")]
    assert items[0].passage.meta["url"] == "https://en.wikipedia.org/wiki?curid=25"
    assert report.read == {"wikiextractor": 1}
    glued = tmp_path / "wiki_01"
    glued.write_text(AUTISM.replace("</doc>\n", "</doc>") + BATMAN, encoding="utf-8")
    assert [i.passage.id for i in read([glued])[0]] == ["wiki:25", "wiki:4729"]


def test_malformed_records_are_named_by_line(tmp_path):
    path = tmp_path / "wiki_00"
    path.write_text(AUTISM + '<doc url="x" title="No id">\nNo id\n\ntext\n</doc>\n'
                    + ANARCHISM.replace("</doc>\n", ""), encoding="utf-8")
    with pytest.raises(InputError, match=rf"{path}:7: <doc> record without an id"):
        read([path])
    errors = RecordErrors("skip")
    items, _ = read([path], errors=errors)
    assert {item.document for item in items} == {"wiki:25"}
    assert errors.skipped == 2
    assert errors.examples[1] == f"{path}:12: record not closed by </doc> at the end of the file"


def test_corrupt_files_are_named_and_the_rest_read(extracted):
    (extracted / "AB" / "wiki_01.bz2").write_bytes(bz2.compress(ANARCHISM.encode())[:-30])
    many = "".join(record(1000 + i, f"Title {i}", [words("w", 150)]) for i in range(300))
    (extracted / "AB" / "wiki_02.gz").write_bytes(gzip.compress(many.encode())[:-40])
    items, report = read([extracted])
    assert report.read == {"wikiextractor": 3}
    skipped = {Path(s.path).name: s for s in report.skipped}
    assert skipped["wiki_01.bz2"].reason == "corrupt" and "bz2" in skipped["wiki_01.bz2"].detail
    assert skipped["wiki_02.gz"].reason == "corrupt" and "gzip" in skipped["wiki_02.gz"].detail
    assert "passage(s) before it were kept" in skipped["wiki_02.gz"].detail
    assert {"wiki:12", "wiki:1000"} <= {item.document for item in items}


def test_a_corrupt_file_given_alone_is_one_line(tmp_path):
    path = tmp_path / "wiki_00.bz2"
    path.write_bytes(b"BZh91AY&SY" + b"\x00" * 40)
    with pytest.raises(InputError, match=rf"^{path}: corrupt or truncated bz2 data"):
        source_kind(path)


def test_kb_build_of_a_wikiextractor_folder(capsys, tmp_path, extracted, loaded):
    (extracted / "AB" / "wiki_01.bz2").write_bytes(b"BZh91AY&SY" + b"\x00" * 40)  # corrupt from the start
    out = tmp_path / "wiki-kb"
    code, stdout, err = run(capsys, "kb", "build", extracted, "--out", out, "--quiet", "--json")
    assert code == 0, err
    built = json.loads(stdout)
    assert built["num_passages"] == 6 and built["files_read"] == {"wikiextractor": 3}
    assert built["empty_records_skipped"] == 1
    assert [(Path(s["path"]).name, s["reason"]) for s in built["files_not_read"]] == [("wiki_01.bz2", "corrupt")]
    kb = KnowledgeBase.load(out)
    assert {p.title for p in kb} == {"Anarchism", "Autism", "Batman & Robin (film)", '"Hello, World!" program'}
    assert [d["document"] for d in list_documents(out)] == ["wiki:12", "wiki:25", "wiki:4729", "wiki:13834"]
    code, stdout, err = run(capsys, "kb", "build", extracted, "--out", tmp_path / "kb2", "--quiet")
    assert code == 0 and "files read: 3 wikiextractor" in stdout and "records with no text skipped: 1" in stdout


def test_sync_and_delete_work_per_article(tmp_path, extracted):
    out = tmp_path / "kb"
    KnowledgeBase.build(lambda: iter_source_passages([extracted]), encode, INFO, out, progress=False)
    (extracted / "AA" / "wiki_00").write_text(ANARCHISM + AUTISM.replace("impaired", "differences in"),
                                              encoding="utf-8")
    (extracted / "AB" / "wiki_00.bz2").unlink()
    report = sync_documents(out, iter_source_passages([extracted]), encode, root=extracted)
    assert report["replaced"] == ["wiki:25"] and report["deleted"] == ["wiki:13834"]
    assert report["unchanged"] == ["wiki:12", "wiki:4729"] and report["added"] == []
    delete_document(out, "wiki:12")
    assert [d["document"] for d in list_documents(out)] == ["wiki:4729", "wiki:25"]


def test_a_sync_with_a_corrupt_file_deletes_nothing(capsys, tmp_path, extracted, loaded):
    out = tmp_path / "kb"
    code, _, err = run(capsys, "kb", "build", extracted, "--out", out, "--quiet")
    assert code == 0, err
    before = [d["document"] for d in list_documents(out)]
    (extracted / "AB" / "wiki_00.bz2").write_bytes(bz2.compress(HELLO.encode())[:-20])  # its article unseen
    code, stdout, err = run(capsys, "kb", "sync", out, extracted, "--quiet", "--json")
    assert code == 0, err
    synced = json.loads(stdout)
    assert synced["deleted"] == [] and "wiki:13834" in synced["kept"]
    assert [(Path(s["path"]).name, s["reason"]) for s in synced["files_not_read"]] == [("wiki_00.bz2", "corrupt")]
    assert [d["document"] for d in list_documents(out)] == before
    code, stdout, err = run(capsys, "kb", "sync", out, extracted, "--quiet")
    assert code == 0 and "wiki_00.bz2" in stdout and "no document was deleted" in stdout
    code, _, err = run(capsys, "kb", "sync", out, extracted, "--quiet", "--strict")
    assert code == 2 and "wiki_00.bz2" in err and [d["document"] for d in list_documents(out)] == before
    (extracted / "AB" / "wiki_00.bz2").unlink()  # gone for good: now the sync deletes its article
    code, stdout, err = run(capsys, "kb", "sync", out, extracted, "--quiet", "--json")
    assert code == 0 and json.loads(stdout)["deleted"] == ["wiki:13834"]


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/data/wikipedia-2015-core")
def test_a_real_wikiextractor_file():
    items, report = read([REAL / "AA" / "wiki_00.gz"])
    assert report.read == {"wikiextractor": 1}
    first = items[0].passage
    assert first.id == "wiki:12#0" and first.title == "Anarchism" and first.meta["page_id"] == "12"
    assert first.text.startswith("Anarchism is a political philosophy")
    titles = {item.passage.meta["page_id"]: item.passage.title for item in items}
    assert titles["25"] == "Autism" and titles["307"] == "Abraham Lincoln"
    assert all(item.passage.meta["source"] == f"wiki:{item.passage.meta['page_id']}" for item in items)
    assert len({item.passage.id for item in items}) == len(items)


def test_an_interrupted_build_resumes(tmp_path, extracted):
    from tiny_kb import Crash, crashing_encoder

    many = "".join(record(1000 + i, f"Title {i}", [words(f"t{i}w", 30)]) for i in range(20))
    (extracted / "AB" / "wiki_01").write_text(many, encoding="utf-8")
    clean = KnowledgeBase.build(lambda: iter_source_passages([extracted]), encode, INFO, tmp_path / "clean",
                                progress=False, batch_size=4)
    out, calls = tmp_path / "kb", []
    with pytest.raises(Crash):
        KnowledgeBase.build(lambda: iter_source_passages([extracted]), crashing_encoder(3, calls), INFO, out,
                            progress=False, batch_size=4, resume=True)
    resumed: list = []
    kb = KnowledgeBase.build(lambda: iter_source_passages([extracted]), crashing_encoder(0, resumed), INFO, out,
                             progress=False, batch_size=4, resume=True)
    assert sum(resumed) == len(clean) - 8  # the two batches done before the crash are not encoded again
    assert [(p.id, p.title, p.text) for p in kb] == [(p.id, p.title, p.text) for p in clean]
