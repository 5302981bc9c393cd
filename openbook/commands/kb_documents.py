"""``openbook kb sync``, ``kb list`` and ``kb delete --document``: a knowledge base as documents.

Every passage read from a file remembers its document: in a folder, the file's path relative to the
folder (``guide/intro.md``, whatever path the folder is given by); for a file source, the file's name or a
record's ``document`` field. ``kb sync KB DIR`` makes the knowledge base match the folder as one new
version; ``kb list`` shows the documents and their passages; ``kb delete KB --document ID`` removes one.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from openbook.commands import kb_build, options, positive_int
from openbook.presets import ON_ERROR


def register(actions, delete: argparse.ArgumentParser, kb_encoder: Callable, record_errors: Callable) -> None:
    """Add ``kb sync`` and ``kb list`` to the ``kb`` subparsers and ``--document`` to ``kb delete``;
    ``kb_encoder(path, manifest, args)`` loads the encoder to add passages with, ``record_errors(on_error)``
    makes the policy for malformed records (those of :mod:`openbook.commands.kb`)."""
    sync = actions.add_parser(
        "sync",
        help="make a knowledge base match a folder: add new files, replace changed ones, delete removed ones",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read DIR as `kb build` does and make the documents of KB match it, as one new version: files\n"
            "not yet in KB are added, files whose content (sha256) changed are replaced, documents whose\n"
            "file is gone are deleted; unchanged files are not re-encoded. A document is a file's path\n"
            "relative to DIR. A failed or interrupted sync changes nothing (the next edit undoes it); run it\n"
            "again. Nothing changed: no new version. While a file of DIR cannot be read (corrupt, say), no\n"
            "document is deleted: the sync names the file and keeps what it cannot see."
        ),
        epilog="example:\n  openbook kb build notes/ --out my-kb\n  openbook kb sync my-kb notes/ --json",
    )
    sync.add_argument("dir", metavar="KB", help="the knowledge base")
    sync.add_argument("source", metavar="DIR", help="the folder (or corpus file) it should match")
    sync.add_argument("--encoder", metavar="NAME_OR_PATH", default=None,
                      help="document encoder (default: the one the knowledge base was built with)")
    sync.add_argument("--max-words", type=positive_int, default=None, metavar="N",
                      help="words per passage (default: as the knowledge base was built)")
    sync.add_argument("--on-error", choices=ON_ERROR, default="stop",
                      help="a malformed record stops the sync (default, nothing changes) or is skipped; a file "
                           "that gave no passages but is still there keeps its old passages")
    sync.add_argument("--batch-size", type=positive_int, default=256, metavar="N")
    sync.add_argument("--description", default=None, help="describe this version (default: what changed)")
    sync.add_argument("--json", action="store_true", help="print what was added, replaced and deleted as JSON")
    options.add_options(sync, "quiet")
    kb_build.add_source_options(sync)
    options.add_options(sync, "device")
    sync.set_defaults(handler=_cmd_sync, kb_encoder=kb_encoder, record_errors=record_errors)

    listing = actions.add_parser("list", help="list the documents of a knowledge base and their passage ids")
    listing.add_argument("dir", metavar="KB")
    listing.add_argument("--version", type=positive_int, default=None, metavar="N",
                         help="at this version (default: the current one)")
    listing.add_argument("--json", action="store_true", help="print a JSON list of {document, sha256, passages}")
    listing.set_defaults(handler=_cmd_list)

    delete.add_argument("--document", default=None, metavar="ID",
                        help="delete every passage of this document (a path as `kb list` shows it) instead of IDs")


def _plain(path: Path, action: str) -> None:
    from openbook.errors import InputError
    from openbook.index.sharded import is_sharded

    if is_sharded(path):
        raise InputError(f"knowledge base {path} is sharded: `openbook kb {action}` works on unsharded knowledge "
                         f"bases (sync or edit the knowledge base before `kb shard`)")


def _cmd_sync(args: argparse.Namespace) -> int:
    from openbook.commands.kb_encode import encode_fn
    from openbook.corpus import check_sources, iter_source_passages, source_kind
    from openbook.index.kb import read_manifest, sync_documents

    path = Path(args.dir)
    _plain(path, "sync")
    manifest = read_manifest(path)
    sources = check_sources([args.source])
    max_words = args.max_words or manifest.get("build", {}).get("max_words") or 100
    errors = args.record_errors(args.on_error)
    files = kb_build.source_report(args, sources, max_words, errors)  # --strict reads before the encoder loads
    encoder = args.kb_encoder(path, manifest, args)
    root = sources[0] if source_kind(sources[0]) == "folder" else None
    passages = iter_source_passages(sources, max_words, errors, files, args.text_columns, args.meta_fields)
    with kb_build.reading_files(args, sources, files):
        report = sync_documents(
            path, passages, encode_fn(encoder), batch_size=args.batch_size, progress=not args.quiet, on_error=errors,
            description=args.description, source_label=args.source, root=root, source_report=files,
        )
    num_passages = read_manifest(path)["num_passages"]
    if args.json:
        print(json.dumps({"kb": str(path), **report, "num_passages": num_passages, "skipped": errors.skipped,
                          **files.as_dict()}, ensure_ascii=False, indent=2))
        return 0
    if report["version"] is None:
        print(f"knowledge base {path} already matches {args.source} ({len(report['unchanged'])} documents); "
              f"no new version")
    else:
        print(f"knowledge base {path}: version {report['version']}: {len(report['added'])} added, "
              f"{len(report['replaced'])} replaced, {len(report['deleted'])} deleted, "
              f"{len(report['unchanged'])} unchanged documents ({num_passages} passages)")
    for key in ("added", "replaced", "deleted", "kept"):
        for document in report[key]:
            print(f"  {key:<8} {document}")
    if errors.skipped:
        print(f"  skipped {errors.skipped} malformed record(s); first: {errors.examples[0]}")
    for line in files.lines():
        print(f"  {line}")
    if files.incomplete:
        print("  no document was deleted while a file could not be read; fix or remove it and sync again")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from openbook.index.kb import list_documents

    path = Path(args.dir)
    _plain(path, "list")
    documents = list_documents(path, args.version)
    if args.json:
        print(json.dumps(documents, ensure_ascii=False, indent=2))
        return 0
    for entry in documents:
        name = entry["document"] if entry["document"] is not None else "(passages of no document)"
        print(f"{name}  ({len(entry['passages'])} passage{'s' * (len(entry['passages']) != 1)})")
        for pid in entry["passages"]:
            print(f"  {pid}")
    return 0


def delete_document(args: argparse.Namespace) -> int | None:
    """``kb delete KB --document ID`` (None when the command names passage ids instead)."""
    from openbook.errors import InputError
    from openbook.index.kb import delete_document as delete
    from openbook.index.kb import read_manifest

    if args.document is None:
        if not args.ids:
            raise InputError("kb delete needs passage IDs or --document ID")
        return None
    if args.ids:
        raise InputError("give passage IDs or --document ID, not both")
    path = Path(args.dir)
    _plain(path, "delete --document")
    version = delete(path, args.document, description=args.description)
    entry = read_manifest(path)["versions"][version - 1]
    print(f"knowledge base {path}: version {version}: {entry['description']} ({entry['num_passages']} passages)")
    return 0
