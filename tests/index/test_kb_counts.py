"""The counts a knowledge base's manifest records (``num_passages``, ``num_rows``, each version's counts)
agree with its passage store, or ``kb info`` and every load say which does not: an edited
``num_passages`` is not "integrity ok"."""

from __future__ import annotations

import json

import pytest

import test_kb_cli
from openbook.errors import KnowledgeBaseError
from openbook.index import KnowledgeBase
from openbook.index.kb import MANIFEST_FILE, read_manifest
from test_kb_cli import build_kb, run
from test_kb_safety import one_error_line

encoders = test_kb_cli.encoders  # fixtures: the encoder loader replaced, a small corpus
corpus_dir = test_kb_cli.corpus_dir


def set_count(manifest: dict, where: str, value) -> None:
    """Set ``num_passages`` or ``versions.<i>.<key>`` in ``manifest``."""
    if where.startswith("versions."):
        _, index, key = where.split(".")
        manifest["versions"][int(index)][key] = value
    else:
        manifest[where] = value


EDITS = [  # (field, edited value, what the error names)
    ("num_passages", 99, "num_passages = 99"),
    ("num_passages", 6, "num_passages = 6"),  # the count of version 1: not the current version's
    ("versions.1.num_passages", 4, "version 2's num_passages = 4"),
    ("versions.0.num_passages", 5, "version 1's num_passages = 5"),
    ("versions.1.deleted", 0, "version 2's deleted = 0"),
    ("versions.0.added", 8, "version 1's added = 8"),
    ("versions.0.num_rows", 9, "version 1's num_rows = 9"),
    ("versions.0.num_rows", "6", "version 1's num_rows = '6'"),
]


@pytest.mark.parametrize("where, value, named", EDITS)
def test_kb_info_and_load_refuse_an_edited_count(capsys, tmp_path, corpus_dir, encoders, where, value, named):
    out = tmp_path / "kb"
    build_kb(capsys, corpus_dir, out)
    code, _, err = run(capsys, "kb", "delete", out, "paris")
    assert code == 0, err
    code, text, err = run(capsys, "kb", "info", out, "--json")
    assert code == 0 and json.loads(text)["integrity"].startswith("ok"), err
    counts = {key: read_manifest(out)[key] for key in ("num_passages", "num_rows")}
    assert counts == {"num_passages": 5, "num_rows": 6}
    manifest_path = out / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    set_count(manifest, where, value)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    code, text, err = run(capsys, "kb", "info", out)
    assert code == 2 and "integrity ok" not in text and "ok (" not in text
    assert named in one_error_line(err) and "manifest.json" in err
    with pytest.raises(KnowledgeBaseError, match=named.replace("(", r"\(")):
        KnowledgeBase.load(out)
    code, _, err = run(capsys, "retrieve", "capital", "--kb", out)
    assert code == 2 and named in one_error_line(err)
