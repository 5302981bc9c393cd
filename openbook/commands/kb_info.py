"""``openbook kb info``, ``kb versions`` and ``kb use``: describe a knowledge base, list its versions, switch
between them. None of them loads an encoder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from openbook.commands import positive_int


def register_info(actions) -> None:
    info = actions.add_parser("info", help="describe a knowledge base: passages, encoder, index, versions, sizes")
    info.add_argument("dir", metavar="DIR")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(handler=_cmd_info)


def register_versions(actions) -> None:
    versions = actions.add_parser("versions", help="list the versions of a knowledge base")
    versions.add_argument("dir", metavar="DIR")
    versions.add_argument("--json", action="store_true", help="print a JSON list")
    versions.set_defaults(handler=_cmd_versions)


def register_use(actions) -> None:
    use = actions.add_parser("use", help="make VERSION the current version (e.g. to restore old knowledge)")
    use.add_argument("dir", metavar="DIR")
    use.add_argument("version", type=positive_int, metavar="VERSION")
    use.set_defaults(handler=_cmd_use)


def _cmd_info(args: argparse.Namespace) -> int:
    from openbook.index.kb import KnowledgeBase, disk_usage, read_manifest
    from openbook.index.kb.layout import CHECKSUM_AUTO_MAX_BYTES

    path = Path(args.dir)
    manifest = read_manifest(path)
    KnowledgeBase.load(path).close()  # what loading checks (files, counts): a damaged knowledge base is an error
    integrity = ("ok (files present with their recorded sizes, counts as in the store; sha256 checked for files "
                 f"up to {CHECKSUM_AUTO_MAX_BYTES >> 20} MiB, as loading checks)")
    sizes = disk_usage(path)
    if args.json:
        record = {
            "path": str(path),
            "num_passages": manifest["num_passages"],
            "num_rows": manifest["num_rows"],
            "current_version": manifest["current_version"],
            "latest_version": manifest["latest_version"],
            "integrity": integrity,
            "disk_bytes": sizes,
            "manifest": manifest,
        }
        print(json.dumps(record, ensure_ascii=False, indent=2))
        return 0
    current, latest = manifest["current_version"], manifest["latest_version"]
    print(f"knowledge base {path}")
    print(f"  passages: {manifest['num_passages']} at version {current} of {latest}"
          + ("" if current == latest else " (not the latest: `openbook kb use` to switch)"))
    print_summary(manifest, sizes)
    for name, size in sizes.items():
        if name != "total":
            print(f"            {name}: {_size(size)}")
    build = manifest.get("build", {})
    if build.get("skipped"):
        print(f"  skipped:  {build['skipped']} malformed record(s) at build time")
    print(f"  created:  {manifest.get('created_at', '?')}, updated {manifest.get('updated_at', '?')}")
    print(f"  format:   {manifest['format_version']}; integrity {integrity}")
    if "pending_edit" in manifest:
        print(f"  note:     an edit was interrupted ({manifest['pending_edit'].get('action')}); the next edit cleans it up")
    return 0


def _cmd_versions(args: argparse.Namespace) -> int:
    from openbook.index.sharded import stored_manifest

    manifest = stored_manifest(Path(args.dir))
    versions = manifest["versions"]
    current = manifest["current_version"]
    if args.json:
        print(json.dumps([{**v, "current": v["version"] == current} for v in versions], ensure_ascii=False, indent=2))
        return 0
    print(f"  {'version':>7}  {'created (UTC)':<25}  {'passages':>9}  description")
    for v in versions:
        mark = "*" if v["version"] == current else " "
        print(f"{mark} {v['version']:>7}  {v['created_at']:<25}  {v['num_passages']:>9}  {v['description']}")
    print(f"(* = current version {current})")
    return 0


def _cmd_use(args: argparse.Namespace) -> int:
    from openbook.index.sharded import edits_for

    manifest = edits_for(args.dir).use(Path(args.dir), args.version)
    latest = manifest["latest_version"]
    print(f"knowledge base {args.dir}: now at version {args.version} of {latest} "
          f"({manifest['num_passages']} passages)")
    return 0


def print_summary(manifest: dict, sizes: dict) -> None:
    from openbook.index.kb import describe_encoder

    index = manifest["index"]
    params = ", ".join(f"{k}={v}" for k, v in index["params"].items() if v is not None)
    print(f"  encoder:  {describe_encoder(manifest['encoder'])}")
    print(f"  vectors:  {manifest['num_rows']} x {manifest['dim']} {manifest['dtype']}")
    print(f"  index:    {index['type']}" + (f" ({params})" if params else "") + f" in {index['file']}")
    print(f"  on disk:  {_size(sizes['total'])}")
    stages = manifest.get("build", {}).get("seconds")
    if stages:
        print(f"  built in: {stage_line(stages)}")


def stage_line(stages: dict) -> str:
    """The build's stages as one line: ``encode`` (reading and encoding, streamed), ``store``, ``index``."""
    parts = [f"{name} {stages[name]:.1f} s" for name in ("encode", "store", "index") if name in stages]
    if "encode_passages_per_s" in stages:
        parts[0] += f" ({stages['encode_passages_per_s']:.1f} passages/s)"
    return ", ".join(parts)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
