"""``openbook kb``: build and edit knowledge bases.

``kb build`` streams a corpus (a folder of documents of any supported type, JSON Lines, DPR TSV, Parquet) into
a knowledge base; if it is interrupted, the same command continues where it stopped. ``kb add``, ``kb update``
and ``kb delete`` change a knowledge base without rebuilding it, each change a new version. ``kb info``,
``kb versions`` and ``kb use`` are in :mod:`openbook.commands.kb_info`, ``kb sync`` and ``kb list`` in
:mod:`openbook.commands.kb_documents`, ``kb shard`` in :mod:`openbook.commands.kb_shard`.

Nothing heavy is imported until a command runs; the encoder is loaded through :func:`load_encoder`,
which tests replace.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from openbook.commands import kb_build, kb_documents, kb_info, kb_shard, options, positive_int
from openbook.commands.kb_encode import RAY_BATCH, build_encode_passages, check_build_compile, encode_fn
from openbook.presets import AUTO_INDEX, DTYPES, EMBEDDING_DTYPES, ON_ERROR


def load_encoder(name: str):
    """The document/query encoder called ``name`` (replaced by a tiny encoder in the CLI tests)."""
    from openbook.models import load_encoder as load

    return load(name)




# --------------------------------------------------------------------------------------------------
# parser


def register(subparsers) -> None:
    """Add the ``kb`` command group to the top-level ``subparsers``."""
    group = subparsers.add_parser(
        "kb",
        help="build, inspect and edit knowledge bases (kb build | info | add | update | delete | reindex | versions | use "
             "| shard | sync | list)",
        description="Knowledge-base commands. Run `openbook kb ACTION --help` for one of them.",
    )
    actions = group.add_subparsers(dest="kb_action", metavar="ACTION", required=True)
    _register_build(actions)
    kb_info.register_info(actions)
    _register_add(actions)
    _register_update(actions)
    delete = _register_delete(actions)
    _register_reindex(actions)
    kb_info.register_versions(actions)
    kb_info.register_use(actions)
    kb_shard.register(actions)
    kb_documents.register(actions, delete, _kb_encoder, _record_errors)


def _register_build(actions) -> None:
    build = actions.add_parser(
        "build",
        help="encode a corpus into a new knowledge base (resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read SOURCEs, split them into disjoint passages of at most --max-words words (keeping the\n"
            "titles), encode them with the document encoder and index them into DIR. The corpus is\n"
            "streamed: memory does not grow with its size. Sources:\n"
            "  *.jsonl[.gz]     {title, text} or {id, contents} records (DPR / FlashRAG / Pyserini)\n"
            "  *.tsv[.gz]       DPR psgs_w100.tsv: a header row, then id<TAB>text<TAB>title\n"
            "  *.parquet        columns title/text or contents (and optionally id)\n"
            "  *.csv            a header row, then one record per row ('name: value' lines; --text-columns)\n"
            "  *.txt, *.md      text in any common encoding; Markdown rendered (title = first heading)\n"
            "  *.html, *.pdf, *.docx  main content, pages, paragraphs (pip install 'openbook[docs]')\n"
            "  (Markdown, HTML and DOCX split at their headings, PDF at its pages: no passage spans two)\n"
            "  folder           every file of these types in it; each file not read is named, with why\n"
            "If the build is interrupted, running the same command again continues after the last\n"
            "completed batch (the state is kept in DIR.partial). DIR appears only once complete; an\n"
            "existing knowledge base at DIR is replaced only with --force (and locked against edits\n"
            "meanwhile), a folder holding anything else never."
        ),
        epilog=(
            "examples:\n"
            "  openbook kb build notes/ --out my-kb\n"
            "  openbook kb build psgs_w100.tsv --out wiki-kb --index hnsw --dtype float16\n"
            "  openbook kb build corpus.parquet --out kb --index ivfpq --index-param nlist=4096 --on-error skip"
        ),
    )
    build.add_argument("sources", nargs="+", metavar="SOURCE", help="corpus files or folders")
    build.add_argument("--out", required=True, metavar="DIR", help="the knowledge-base directory to write")
    build.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                       help="document encoder d(z); queries must use the same one (default: the offline all-MiniLM-L6-v2)")
    _add_index_options(build)
    build.add_argument("--max-words", type=positive_int, default=100, metavar="N",
                       help="words per passage (default: %(default)s, as in the RAG paper)")
    build.add_argument("--on-error", choices=ON_ERROR, default="stop",
                       help="a malformed record stops the build (default) or is skipped and counted")
    build.add_argument("--dtype", choices=EMBEDDING_DTYPES, default="float32",
                       help="how the document vectors are stored (default: %(default)s; float16 halves the size)")
    build.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                       help="passages encoded and saved per batch, the unit of resuming (default: 256, "
                            f"{RAY_BATCH} with --ray)")
    build.add_argument("--encode-dtype", choices=DTYPES, default=None,
                       help="compute type of the document encoder: bfloat16 is faster where the CPU has it natively, "
                            "int8 (dynamic quantisation) on x86 CPUs (auto: bfloat16 there, else float32); default: "
                            "float32 (bench/build_throughput.py compares their speed and NQ recall@5)")
    build.add_argument("--compile", action="store_true",
                       help="encode with a TorchInductor-compiled copy of the encoder, compiled first (tens of "
                            "seconds): with --encode-dtype int8 it quantises through torchao and is the fastest "
                            "way here (bench/build_throughput.py); needs a C++ compiler, and torchao for int8 "
                            "(pip install 'openbook[compile]'). With --ray each actor compiles once, at the first "
                            "batch")
    build.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="encode on a Ray cluster (a pool of actors that serve the whole build, one encoder each): the one at "
                            "ADDRESS (e.g. auto or ray://head:10001), or without ADDRESS a local Ray with this "
                            "machine's CPUs; the knowledge base is the one the local build writes")
    build.add_argument("--ray-workers", type=positive_int, default=None, metavar="N",
                       help="encoder actors for --ray, 1 CPU each (default: the cluster's CPUs)")
    build.add_argument("--force", action="store_true",
                       help="replace the knowledge base already at DIR (its versions are lost); without it, a build "
                            "never replaces one")
    build.add_argument("--restart", action="store_true",
                       help="discard the state of an interrupted build of DIR instead of continuing it")
    options.add_options(build, "quiet")
    kb_build.add_source_options(build)
    options.add_options(build, "device")
    build.set_defaults(handler=_cmd_build)


def _add_index_options(parser) -> None:
    parser.add_argument("--index", default=AUTO_INDEX, metavar="TYPE",
                        help="index type: flat (exact), hnsw, ivfpq or hnsw_sq8; auto (the default) is flat for "
                             "small books and hnsw for large ones (docs/guide/knowledge-bases.md)")
    parser.add_argument("--index-param", action="append", default=[], metavar="KEY=VALUE",
                        help="an index parameter, e.g. M=32 or nlist=4096 (repeatable; needs --index)")


def _register_reindex(actions) -> None:
    reindex = actions.add_parser(
        "reindex", help="index the same passages anew, e.g. with HNSW (a new version, nothing encoded again)")
    reindex.add_argument("dir", metavar="DIR")
    _add_index_options(reindex)
    reindex.add_argument("--description", default=None, help="describe this version (default: what changed)")
    options.add_options(reindex, "quiet")
    reindex.set_defaults(handler=_cmd_reindex)


def _register_add(actions) -> None:
    add = actions.add_parser("add", help="add the passages of SOURCEs (a new version, no rebuild)")
    add.add_argument("dir", metavar="DIR")
    add.add_argument("sources", nargs="+", metavar="SOURCE", help="corpus files or folders (as for kb build)")
    add.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                     help="document encoder (default: the one the knowledge base was built with)")
    add.add_argument("--max-words", type=positive_int, default=None, metavar="N",
                     help="words per passage (default: as the knowledge base was built)")
    add.add_argument("--on-error", choices=ON_ERROR, default="stop",
                     help="a malformed record (or an id already present) stops the edit (default) or is skipped")
    add.add_argument("--batch-size", type=positive_int, default=256, metavar="N")
    add.add_argument("--description", default=None, help="describe this version (default: what changed)")
    options.add_options(add, "quiet")
    kb_build.add_source_options(add)
    options.add_options(add, "device")
    add.set_defaults(handler=_cmd_add)


def _register_update(actions) -> None:
    update = actions.add_parser(
        "update",
        help="change passages' text or title (a new version; the old text stays in earlier versions)",
        description="Change one passage (--id and --text, optionally --title) or many (--file, JSON Lines "
                    "of {id, text, title?}). A passage keeps its title unless a new one is given, and its "
                    "metadata but for the fields --meta-fields names, set from each record that has them.",
    )
    update.add_argument("dir", metavar="DIR")
    update.add_argument("--id", dest="passage_id", metavar="ID", help="the passage to change")
    update.add_argument("--text", help="its new text")
    update.add_argument("--title", default=None, help="its new title (default: unchanged)")
    update.add_argument("--file", metavar="UPDATES.jsonl", help="JSON Lines of {id, text, title?}")
    update.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                        help="document encoder (default: the one the knowledge base was built with)")
    update.add_argument("--description", default=None, help="describe this version (default: what changed)")
    kb_build.add_meta_fields_option(update)
    options.add_options(update, "device")
    update.set_defaults(handler=_cmd_update, subparser=update)


def _register_delete(actions):
    delete = actions.add_parser("delete", help="delete passages by id or a whole --document (a new version; earlier ones keep them)")
    delete.add_argument("dir", metavar="DIR")
    delete.add_argument("ids", nargs="*", metavar="ID")
    delete.add_argument("--description", default=None, help="describe this version (default: what changed)")
    delete.set_defaults(handler=_cmd_delete)
    return delete


# --------------------------------------------------------------------------------------------------
# helpers


def _record_errors(on_error: str):
    from openbook.corpus import RecordErrors

    return RecordErrors(on_error, report=lambda message: warnings.warn(f"skipped {message}", stacklevel=2))


def _kb_encoder(path: Path, manifest: dict, args: argparse.Namespace):
    """The encoder to add passages with: ``--encoder`` or the knowledge base's own, checked against it, on
    ``--device``."""
    from openbook.index.kb import check_encoder_matches

    device = options.device(args)  # a missing GPU fails before the encoder loads
    built_with = manifest["encoder"]
    encoder = load_encoder(args.encoder or built_with.get("name") or "default")
    check_encoder_matches(path, built_with, encoder.info())
    return encoder.to(device)


def _edited(path: Path, version: int) -> int:
    from openbook.index.sharded import stored_manifest

    manifest = stored_manifest(path)
    entry = manifest["versions"][version - 1]
    print(f"knowledge base {path}: version {version}: {entry['description']} "
          f"({entry['num_passages']} passages)")
    return 0


# --------------------------------------------------------------------------------------------------
# handlers


def _cmd_build(args: argparse.Namespace) -> int:
    from openbook.corpus import check_sources, iter_source_passages
    from openbook.index.kb import KnowledgeBase, disk_usage, parse_index_params, partial_dir
    from openbook.index.kb.folder import _locked, check_out_dir, check_replaceable
    from openbook.index.kb.indexing import check_index_type
    from openbook.index.kb.layout import LOCK_FILE

    # Everything that can be checked without the encoder is checked first (fails in milliseconds).
    sources = check_sources(args.sources)
    params = parse_index_params(args.index_param)
    index_type = check_index_type(args.index, params)
    out = check_out_dir(args.out)
    check_replaceable(out, args.force)
    if args.restart and partial_dir(out).is_dir():
        with _locked(partial_dir(out) / LOCK_FILE, f"build directory {partial_dir(out)}"):  # not a running build's
            shutil.rmtree(partial_dir(out), ignore_errors=True)
    errors = _record_errors(args.on_error)
    report = kb_build.source_report(args, sources, args.max_words, errors)  # --strict: every file read first
    device = options.device(args)  # a missing GPU fails before the encoder loads
    check_build_compile(args)  # and so does --compile without a C++ compiler (or torchao for int8)
    encoder = load_encoder(args.encoder or "default").to(device)  # --encoder defaults to None in every command
    names = ", ".join(str(s) for s in args.sources)
    batch_size = args.batch_size or (RAY_BATCH if args.ray is not None else 256)
    with build_encode_passages(args, encoder) as encode_passages, kb_build.reading_files(args, sources, report):
        kb = KnowledgeBase.build(
            lambda: iter_source_passages(sources, args.max_words, errors, report, args.text_columns, args.meta_fields),
            encode_passages,
            encoder.info(),
            out,
            batch_size=batch_size,
            progress=not args.quiet,
            index_type=index_type,
            index_params=params,
            dtype=args.dtype,
            on_error=errors,
            resume=True,
            description=f"build from {names}",
            source_info={"sources": [str(s.resolve()) for s in sources], "max_words": args.max_words},
            replace=args.force,
        )
    kb_build.print_built(args, kb, len(sources), errors, report, lambda: kb_info.print_summary(kb.manifest, disk_usage(kb.path)))
    kb.close()
    return 0


def _cmd_add(args: argparse.Namespace) -> int:
    from openbook.corpus import check_sources, iter_source_passages
    from openbook.index.sharded import edits_for, stored_manifest

    path = Path(args.dir)
    manifest = stored_manifest(path)
    sources = check_sources(args.sources)
    max_words = args.max_words or manifest.get("build", {}).get("max_words") or 100
    errors = _record_errors(args.on_error)
    report = kb_build.source_report(args, sources, max_words, errors)  # --strict: every file read first
    encoder = _kb_encoder(path, manifest, args)
    names = ", ".join(str(s) for s in args.sources)
    with kb_build.reading_files(args, sources, report):
        version = edits_for(path).add(
            path, iter_source_passages(sources, max_words, errors, report, args.text_columns, args.meta_fields),
            encode_fn(encoder),
            batch_size=args.batch_size, progress=not args.quiet, on_error=errors, description=args.description,
            source_label=names,
        )
    return kb_build.print_added(args, path, version, errors, report, _edited)


def _cmd_update(args: argparse.Namespace) -> int:
    from openbook.corpus.readers import read_numbered_records, record_meta
    from openbook.errors import InputError
    from openbook.index.sharded import edits_for, stored_manifest

    single = args.passage_id is not None or args.text is not None or args.title is not None
    if single == (args.file is not None):
        args.subparser.error("give either --id with --text (and optionally --title), or --file")
    if single and (args.passage_id is None or args.text is None):
        args.subparser.error("--id and --text go together")
    if single and args.meta_fields:
        args.subparser.error("--meta-fields names fields of the records of --file")
    path = Path(args.dir)
    manifest = stored_manifest(path)
    if single:
        updates: list[dict[str, Any]] = [
            {"id": args.passage_id, "text": args.text, "title": args.title, "where": "--id"}
        ]
    else:
        updates = []
        for lineno, record in read_numbered_records(args.file):
            where = f"{args.file}:{lineno}"
            try:
                fields = {"set_meta": record_meta(record, args.meta_fields)} if args.meta_fields else {}
            except InputError as error:
                raise InputError(f"{where}: {error}") from None
            updates.append({**{k: record.get(k) for k in ("id", "text", "title")}, **fields, "where": where})
        if not updates:
            raise InputError(f"{args.file} has no updates")
    encoder = _kb_encoder(path, manifest, args)
    version = edits_for(path).update(path, updates, encode_fn(encoder), description=args.description)
    return _edited(path, version)


def _cmd_delete(args: argparse.Namespace) -> int:
    from openbook.index.sharded import edits_for

    if (done := kb_documents.delete_document(args)) is not None:
        return done
    path = Path(args.dir)
    version = edits_for(path).delete(path, args.ids, description=args.description)
    return _edited(path, version)


def _cmd_reindex(args: argparse.Namespace) -> int:
    from openbook.errors import InputError
    from openbook.index.kb import parse_index_params
    from openbook.index.kb.edit import reindex
    from openbook.index.sharded import is_sharded

    path = Path(args.dir)
    if is_sharded(path):
        raise InputError(f"{path} is a sharded knowledge base: reindex each of its shard folders")
    version = reindex(path, args.index, parse_index_params(args.index_param), progress=not args.quiet,
                      description=args.description)
    return _edited(path, version)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `openbook kb ...`")
