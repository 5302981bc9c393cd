"""Ingest speed: documents and passages read per second per format, and where a folder build's time goes.

Corpus: ``--files`` files (seeded, the same for the same ``--seed``) written to a temporary folder, one subfolder
per format and as many files of each: Markdown, HTML, PDF (written here: one page per ~350 words, a line of
Helvetica text per line), DOCX (python-docx), CSV (one record per row), plain text and JSON Lines (one record per
~80-300 words). Each file holds 200-3000 words (log-uniform: many short files, some long ones) of made-up English in
titled sections of paragraphs, as handbooks and notes are.

Reading: ``openbook.corpus.readers.iter_source_passages`` over each format's folder, as ``kb build`` reads a
folder (passages of at most 100 words), after one untimed read of a file of each format (so that importing its
library is not timed): files read (documents) and passages per second, and input megabytes per second.

Build: the whole folder built into a knowledge base as ``openbook kb build DIR --out KB`` builds it (the
``--encoder``, batches of 256 passages, a flat float32 index) with its time split into reading (time spent
waiting on the passage stream), encoding (in the encoder), indexing (creating the index) and the rest (the
passage store, the embeddings file, the manifest); the encoder's loading is timed apart.

Usage:  PYTHONPATH=. .venv/bin/python bench/ingest.py [--files 1000] [--encoder default] [--seed 0] [--keep DIR]

It ends with one JSON line: ``formats`` (per format: files, passages, words, megabytes, seconds, docs_per_s,
passages_per_s, mb_per_s), ``reading`` (the same over all formats), ``build`` (seconds, passages,
passages_per_s, reading_s, encoding_s, indexing_s, other_s and each one's share of the build), ``encoder_load_s``,
``cpu`` and the settings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from html import escape
from pathlib import Path

from _common import cpu_description, print_header, quiet
from _pdf import pdf_bytes

FORMATS = ("markdown", "html", "pdf", "docx", "csv", "text", "jsonl")
SUFFIX = {"markdown": ".md", "html": ".html", "pdf": ".pdf", "docx": ".docx", "csv": ".csv", "text": ".txt",
          "jsonl": ".jsonl"}
MIN_WORDS, MAX_WORDS = 200, 3000
PDF_WORDS_PER_PAGE = 350
BATCH_SIZE = 256  # kb build's default

VOCABULARY = """
the of and to in a is that for it as was with be by on not he this are or his from at which but have an they
you were her all she there would their we him been has when who will more no if out so said what up its about
into than them can only other new some could time these two may then do first any my now such like our over man
me even most made after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great old year off come since
against go came right used take three policy employee manager office travel expense claim report review team
project budget meeting customer service product market sales quarter revenue growth plan goal process system
data network security access account password device support request ticket issue release version update
training course session lesson student teacher school river mountain city country history science energy water
garden kitchen recipe bread coffee health doctor patient hospital insurance contract payment invoice supplier
order delivery warehouse stock price cost benefit leave vacation holiday salary bonus review approval deadline
schedule calendar research study method result analysis figure table chapter section note summary appendix
""".split()
HEADINGS = """overview background purpose scope policy procedure responsibilities eligibility requirements
examples exceptions timeline budget risks results discussion methods summary contacts references history
guidelines checklist questions answers""".split()


# --------------------------------------------------------------------------------------------------
# the corpus


def sentence(rng: random.Random) -> str:
    words = rng.choices(VOCABULARY, k=rng.randint(8, 20))
    return " ".join(words).capitalize() + rng.choice(".....?!")


def paragraph(rng: random.Random, words: int) -> str:
    out: list[str] = []
    while sum(len(s.split()) for s in out) < words:
        out.append(sentence(rng))
    return " ".join(out)


def title(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCABULARY, k=rng.randint(2, 5))).title()


def document(rng: random.Random, words: int) -> tuple[str, list[tuple[str, list[str]]]]:
    """A title and its sections: ``(heading, paragraphs)``, about ``words`` words in all."""
    sections = []
    left = words
    while left > 0:
        size = min(left, rng.randint(150, 500))
        paragraphs, section_left = [], size
        while section_left > 0:
            n = min(section_left, rng.randint(40, 120))
            paragraphs.append(paragraph(rng, n))
            section_left -= n
        sections.append((" ".join(rng.sample(HEADINGS, rng.randint(1, 3))).capitalize(), paragraphs))
        left -= size
    return title(rng), sections


def write_markdown(path: Path, doc, rng: random.Random) -> None:
    name, sections = doc
    lines = [f"# {name}", ""]
    for heading, paragraphs in sections:
        lines += [f"## {heading}", ""]
        for text in paragraphs:
            lines += [text, ""]
        if rng.random() < 0.2:
            lines += ["| item | owner | days |", "|------|-------|-----:|"]
            lines += [f"| {rng.choice(VOCABULARY)} | {rng.choice(VOCABULARY)} | {rng.randint(1, 30)} |" for _ in range(3)]
            lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def write_html(path: Path, doc, rng: random.Random) -> None:
    name, sections = doc
    body = [f"<h1>{escape(name)}</h1>"]
    for heading, paragraphs in sections:
        body.append(f"<h2>{escape(heading)}</h2>")
        body += [f"<p>{escape(text)}</p>" for text in paragraphs]
    nav = " | ".join(f'<a href="/{w}">{w.title()}</a>' for w in rng.sample(VOCABULARY, 6))
    page = (f"<!DOCTYPE html><html><head><title>{escape(name)}</title><style>nav {{ color: gray }}</style>"
            f"<script>var page = {rng.randint(1, 10 ** 6)};</script></head><body><nav>{nav}</nav>"
            f"<main><article>{''.join(body)}</article></main>"
            f"<footer>Copyright {rng.randint(1990, 2026)} the intranet team. All rights reserved.</footer></body></html>")
    path.write_text(page, encoding="utf-8")


def write_pdf(path: Path, doc, rng: random.Random) -> None:
    """A PDF written by hand (bench/_pdf.py): Helvetica text, one line per ~12 words, a page per ~350 words;
    title in /Info."""
    name, sections = doc
    words = [w for heading, paragraphs in sections for w in (heading + " " + " ".join(paragraphs)).split()]
    pages = [words[i: i + PDF_WORDS_PER_PAGE] for i in range(0, len(words), PDF_WORDS_PER_PAGE)]
    lines = [[" ".join(page[j: j + 12]) for j in range(0, len(page), 12)] for page in pages]
    path.write_bytes(pdf_bytes(lines, title=name, producer="bench/ingest.py"))


def write_docx(path: Path, doc, rng: random.Random) -> None:
    import docx

    name, sections = doc
    document = docx.Document()
    document.core_properties.title = name
    document.add_heading(name, level=0)
    for heading, paragraphs in sections:
        document.add_heading(heading, level=1)
        for text in paragraphs:
            document.add_paragraph(text)
    document.save(path)


def write_csv(path: Path, doc, rng: random.Random) -> None:
    """One row per paragraph: a title, a category and the text (a header row names the columns)."""
    import csv

    name, sections = doc
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["title", "category", "text"])
        for heading, paragraphs in sections:
            for text in paragraphs:
                writer.writerow([f"{name}: {heading}", rng.choice(HEADINGS), text])


def write_text(path: Path, doc, rng: random.Random) -> None:
    name, sections = doc
    parts = [name, ""]
    for heading, paragraphs in sections:
        parts += [heading.upper(), ""] + [p + "\n" for p in paragraphs]
    path.write_text("\n".join(parts), encoding="utf-8")


def write_jsonl(path: Path, doc, rng: random.Random) -> None:
    """One record per paragraph, ``{title, text}``: ids are the readers' (``<file>:<record>``)."""
    name, sections = doc
    with open(path, "w", encoding="utf-8") as handle:
        for heading, paragraphs in sections:
            for text in paragraphs:
                handle.write(json.dumps({"title": f"{name} > {heading}", "text": text}) + "\n")


WRITERS: dict[str, Callable] = {"markdown": write_markdown, "html": write_html, "pdf": write_pdf, "docx": write_docx,
                                "csv": write_csv, "text": write_text, "jsonl": write_jsonl}


def make_corpus(root: Path, files: int, seed: int) -> dict[str, int]:
    """``files`` files under ``root/<format>/`` (as many of each format, give or take one); the words per format."""
    rng = random.Random(seed)
    words_of = {kind: 0 for kind in FORMATS}
    for i in range(files):
        kind = FORMATS[i % len(FORMATS)]
        folder = root / kind
        folder.mkdir(parents=True, exist_ok=True)
        words = round(math.exp(rng.uniform(math.log(MIN_WORDS), math.log(MAX_WORDS))))
        doc = document(rng, words)
        WRITERS[kind](folder / f"{i:05d}-{kind}{SUFFIX[kind]}", doc, rng)
        words_of[kind] += sum(len(p.split()) for _, paragraphs in doc[1] for p in paragraphs)
    return words_of


# --------------------------------------------------------------------------------------------------
# measuring


def read_folder(folder: Path, max_words: int) -> tuple[int, int, float, list]:
    """``(files read, passages, seconds, files not read)`` of one read of ``folder``."""
    from openbook.corpus.readers import RecordErrors, SourceReport, iter_source_passages

    report = SourceReport()
    start = time.perf_counter()
    passages = sum(1 for _ in iter_source_passages([folder], max_words, RecordErrors("stop"), report))
    seconds = time.perf_counter() - start
    return sum(report.read.values()), passages, seconds, report.skipped


def warm_up(root: Path, max_words: int) -> None:
    """Read one file of each format once, untimed: the libraries they need are imported here."""
    with tempfile.TemporaryDirectory(prefix="ingest-warm-") as warm:
        for kind in FORMATS:
            first = min((root / kind).iterdir())
            shutil.copy(first, Path(warm) / first.name)
        read_folder(Path(warm), max_words)


def rates(files: int, passages: int, seconds: float, size: int, words: int) -> dict:
    return {"files": files, "passages": passages, "words": words, "megabytes": round(size / 1e6, 3),
            "seconds": round(seconds, 3), "docs_per_s": round(files / seconds, 2),
            "passages_per_s": round(passages / seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 3)}


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


class Timer:
    """Seconds spent inside the calls and iterator steps it wraps, by name."""

    def __init__(self):
        self.seconds: dict[str, float] = {"reading": 0.0, "encoding": 0.0, "indexing": 0.0}

    def iterate(self, name: str, items) -> Iterator:
        items = iter(items)
        while True:
            start = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                self.seconds[name] += time.perf_counter() - start
                return
            self.seconds[name] += time.perf_counter() - start
            yield item

    def call(self, name: str, function: Callable) -> Callable:
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return timed


@contextlib.contextmanager
def timed_indexing(timer: Timer) -> Iterator[None]:
    """Time the index creation of a knowledge-base build (the one step of it with no hook of its own)."""
    from openbook.index.kb import build as build_module

    original = build_module._create_index
    build_module._create_index = timer.call("indexing", original)
    try:
        yield
    finally:
        build_module._create_index = original


def build(root: Path, out: Path, encoder, max_words: int) -> dict:
    """Build ``root`` into ``out`` as ``kb build`` does, the reading, encoding and indexing timed apart."""
    from openbook.commands.kb_encode import encode_fn
    from openbook.corpus.readers import RecordErrors, iter_source_passages
    from openbook.index import KnowledgeBase

    timer = Timer()

    def passages():
        return timer.iterate("reading", iter_source_passages([root], max_words, RecordErrors("stop")))

    start = time.perf_counter()
    with timed_indexing(timer):
        kb = KnowledgeBase.build(passages, timer.call("encoding", encode_fn(encoder)), encoder.info(), out,
                                 batch_size=BATCH_SIZE, progress=False, description=f"build from {root}")
    seconds = time.perf_counter() - start
    count = len(kb)
    kb.close()
    parts = dict(timer.seconds, other=max(0.0, seconds - sum(timer.seconds.values())))
    result = {"seconds": round(seconds, 3), "passages": count, "passages_per_s": round(count / seconds, 2)}
    for name, value in parts.items():
        result[f"{name}_s"] = round(value, 3)
        result[f"{name}_share"] = round(value / seconds, 4)
    return result


# --------------------------------------------------------------------------------------------------
# the run


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="files in the corpus (default: %(default)s)")
    parser.add_argument("--encoder", default="default", help="document encoder (default: the offline default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-words", type=int, default=100, help="words per passage, as kb build's default")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="write the corpus and knowledge base here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.files < len(FORMATS):
        parser.error(f"--files must be at least {len(FORMATS)} (one per format)")

    quiet()
    print_header()
    with contextlib.ExitStack() as stack:
        if args.keep:
            work = Path(args.keep)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ingest-")))
        root, out = work / "corpus", work / "kb"
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        words = make_corpus(root, args.files, args.seed)
        print(f"corpus:        {args.files} files, {sum(words.values())} words, {folder_bytes(root) / 1e6:.1f} MB "
              f"in {root} (written in {time.perf_counter() - start:.1f}s)", flush=True)

        warm_up(root, args.max_words)
        formats = {}
        for kind in FORMATS:
            files, passages, seconds, skipped = read_folder(root / kind, args.max_words)
            if skipped:
                sys.exit(f"{kind}: {len(skipped)} file(s) not read, e.g. {skipped[0]}")
            formats[kind] = rates(files, passages, seconds, folder_bytes(root / kind), words[kind])
            print(f"read {kind:<9} {files:5d} files {passages:7d} passages in {seconds:7.2f}s: "
                  f"{formats[kind]['docs_per_s']:8.1f} files/s {formats[kind]['passages_per_s']:9.1f} passages/s "
                  f"{formats[kind]['mb_per_s']:7.2f} MB/s", flush=True)
        total = {key: sum(f[key] for f in formats.values()) for key in ("files", "passages", "seconds", "words")}
        reading = rates(total["files"], total["passages"], total["seconds"], folder_bytes(root), total["words"])
        print(f"read all       {reading['files']:5d} files {reading['passages']:7d} passages in "
              f"{reading['seconds']:7.2f}s: {reading['docs_per_s']:8.1f} files/s {reading['passages_per_s']:9.1f} "
              f"passages/s", flush=True)

        from openbook.models import load_encoder

        start = time.perf_counter()
        encoder = load_encoder(args.encoder)
        encoder_load = time.perf_counter() - start
        print(f"encoder:       {encoder.name} loaded in {encoder_load:.1f}s; building {root} ...", flush=True)
        built = build(root, out, encoder, args.max_words)
        print(f"build:         {built['passages']} passages in {built['seconds']:.1f}s ({built['passages_per_s']:.1f}"
              f" passages/s): reading {built['reading_s']:.1f}s ({100 * built['reading_share']:.1f}%), encoding "
              f"{built['encoding_s']:.1f}s ({100 * built['encoding_share']:.1f}%), indexing {built['indexing_s']:.2f}s "
              f"({100 * built['indexing_share']:.1f}%), other {built['other_s']:.1f}s "
              f"({100 * built['other_share']:.1f}%)", flush=True)

    result = {"files": args.files, "seed": args.seed, "max_words": args.max_words, "encoder": encoder.name,
              "formats": formats, "reading": reading, "build": built, "encoder_load_s": round(encoder_load, 3),
              "cpu": cpu_description(), "cpu_count": os.cpu_count()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
