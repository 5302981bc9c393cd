"""The index of metadata values (``passage_meta_values``, :mod:`openbook.index.store_meta`): a filter's rows
from it equal the JSON scan's (an older store opened read-only) and Python's ``Filter.matches``, whatever the
values (edge characters, 3 vs 3.0 vs "3", booleans vs 0/1, missing fields), the versions, deletions and
metadata changes; a filter searches the table instead of scanning the passages; an older store gains the
table, complete, at its first edit; every write keeps it; a resumed build's store is byte-equal with it."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

import openbook.index.kb.edit as kb_module
from openbook.corpus import Passage
from openbook.index import KnowledgeBase
from openbook.index.filters import Condition, Filter, parse_where
from openbook.index.kb import add_passages, delete_passages
from openbook.index.store import PassageStore
from openbook.index.store_meta import VALUES_TABLE, MetaMixin, after_prefix, entry
from tiny_kb import Crash, build, corpus, crashing_encoder, data_bytes, encode

STRINGS = ["", "x", "xy", "x\ud7ff", "x\ue000", "x\uffff", "x\U0010ffff", "x\U0010ffff\U0010ffff", "\U0010ffff",
           "\ud7ff", "\ue000", "\uffff", "é", "éa", "e\u0301", "3", "3.0", "0", "1", "true", "2026-01-15",
           "2026-01-15T12:00:00Z", "Zürich", "z", "a b", "☃"]
NUMBERS = [0, 1, 3, 3.0, -2, 0.5, -1.5, 2.25, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63, 9.5e18]
FIELDS = ["a", "b", "c", "d", "e-f"]


def random_value(rng):
    pick = rng.random()
    if pick < 0.5:
        return STRINGS[rng.integers(len(STRINGS))]
    if pick < 0.85:
        return NUMBERS[rng.integers(len(NUMBERS))]
    return bool(rng.integers(2))


def random_meta(rng) -> dict | None:
    if rng.random() < 0.1:
        return None
    return {field: random_value(rng) for field in FIELDS if rng.random() < 0.6}


def random_condition(rng) -> Condition:
    field = (FIELDS + ["missing"])[rng.integers(len(FIELDS) + 1)]
    op = ("eq", "eq", "prefix", "gte", "lte")[rng.integers(5)]
    if op == "eq":
        if rng.random() < 0.3:  # the command line's page=3: the number and the string
            number = NUMBERS[rng.integers(len(NUMBERS))]
            return Condition(field, op, (number, str(number)))
        return Condition(field, op, tuple(random_value(rng) for _ in range(rng.integers(1, 3))))
    if op == "prefix":
        text = STRINGS[rng.integers(len(STRINGS))]
        return Condition(field, op, (text[:rng.integers(len(text) + 1)],))
    bound = random_value(rng)
    while isinstance(bound, bool):
        bound = random_value(rng)
    return Condition(field, op, (bound,))


def random_filter(rng) -> Filter:
    return Filter(tuple(random_condition(rng) for _ in range(rng.integers(1, 4))))


def expected_entries(metas: dict[int, dict | None]) -> set[tuple]:
    return {(field, *entry(value), row) for row, meta in metas.items() for field, value in (meta or {}).items()}


def table_entries(store: PassageStore) -> set[tuple]:
    return set(store._query(f"SELECT field, kind, value, row FROM {VALUES_TABLE}"))


def has_table(path) -> bool:
    with sqlite3.connect(path) as db:
        return bool(db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (VALUES_TABLE,)).fetchall())


def without_table(source, destination) -> PassageStore:
    """A read-only copy of the store at ``source`` as an older openbook wrote it (no index of values)."""
    shutil.copy(source, destination)
    db = sqlite3.connect(destination)
    db.execute(f"DROP TABLE {VALUES_TABLE}")
    db.commit()
    db.close()
    return PassageStore.open(destination)


class Book:
    """A passage store written in versions (adds, deletions, metadata changes) and its brute force."""

    def __init__(self, path, rng):
        self.store, self.rng = PassageStore.create(path), rng
        self.metas: dict[int, dict | None] = {}
        self.rows_at: list[int] = [0]  # num_rows of each version (index = version)
        self.deleted: dict[int, int] = {}

    def add(self, n: int) -> None:
        start, version = self.store.num_rows(), len(self.rows_at)
        passages = [Passage(f"p{start + i}", "t", "x", random_meta(self.rng)) for i in range(n)]
        with self.store.transaction():
            self.store.insert(start, passages, version)
            live = [r for r in range(start) if r not in self.deleted]
            gone = [int(r) for r in self.rng.choice(live, size=min(len(live), n // 5), replace=False)]
            self.store.mark_deleted(gone, version)
        self.metas.update({start + i: p.meta for i, p in enumerate(passages)})
        self.deleted.update({r: version for r in gone})
        self.rows_at.append(start + n)

    def set_meta(self, n: int) -> None:
        rows = [int(r) for r in self.rng.choice(len(self.metas), size=n, replace=False)]
        changes = [(r, random_meta(self.rng)) for r in rows]
        with self.store.transaction():
            self.store.set_meta(changes)
        self.metas.update(changes)

    def brute(self, where: Filter, version: int) -> np.ndarray:
        return np.array([r for r in range(self.rows_at[version]) if self.deleted.get(r, version + 1) > version
                         and where.matches(self.metas[r])], dtype=np.int64)

    def check(self, filters, other: PassageStore | None = None) -> None:
        assert self.store._values and table_entries(self.store) == expected_entries(self.metas)
        for where in filters:
            for version in range(1, len(self.rows_at)):
                expected = self.brute(where, version)
                rows = self.store.filter_rows(where, version, self.rows_at[version])
                assert rows.dtype == np.int64
                np.testing.assert_array_equal(rows, expected, err_msg=f"{where} at version {version}")
                if other is not None:
                    np.testing.assert_array_equal(other.filter_rows(where, version, self.rows_at[version]), expected,
                                                  err_msg=f"JSON scan: {where} at version {version}")


def test_after_prefix_bounds_exactly_the_strings_with_the_prefix():
    assert after_prefix("ab") == "ac" and after_prefix("x\ud7ff") == "x\ue000"
    assert after_prefix("x\uffff") == "x\U00010000" and after_prefix("x\U0010ffff\U0010ffff") == "y"
    assert after_prefix("\U0010ffff") is None and after_prefix("") is None
    texts = STRINGS + [a + b for a in STRINGS for b in STRINGS[:8]]
    for prefix in {t[:k] for t in texts for k in range(len(t) + 1)}:
        upper = after_prefix(prefix)
        for text in texts:
            in_range = text >= prefix and (upper is None or text < upper)
            assert in_range == text.startswith(prefix), (prefix, text)


def test_random_filters_match_the_json_scan_and_python(tmp_path):
    """(a, d): random metadata and conditions of every operator, over versions with deletions and metadata
    changes: the rows from the index == the JSON scan's (a copy without the table) == Filter.matches."""
    rng = np.random.default_rng(7)
    book = Book(tmp_path / "p.sqlite", rng)
    for n in (120, 60, 40):
        book.add(n)
    book.set_meta(50)
    filters = [random_filter(rng) for _ in range(150)] + [
        parse_where(["a=3"]), parse_where(["a=true"]), parse_where(["b^=x"]), parse_where(["c>=2026-01-15"]),
        parse_where(["d<=0", "a>=-2"]), Filter((Condition("a", "eq", (1,)),)), Filter((Condition("a", "eq", (True,)),))]
    assert sum(len(book.brute(f, 3)) > 0 for f in filters) > 50  # most filters match something
    old = without_table(tmp_path / "p.sqlite", tmp_path / "old.sqlite")
    assert not old._values
    book.check(filters, old)


def test_every_write_keeps_the_index(tmp_path):
    """(d): adds, set_meta (twice on a row, to and from None), deletions, versions and discard_after (an
    interrupted edit undone) leave the table equal to the entries of every row's metadata."""
    rng = np.random.default_rng(11)
    book = Book(tmp_path / "p.sqlite", rng)
    book.add(80)
    book.add(30)
    with book.store.transaction():
        book.store.set_meta([(0, {"a": "first"}), (1, None), (0, {"a": "x", "b": 3})])
    book.metas.update({0: {"a": "x", "b": 3}, 1: None})
    book.set_meta(20)
    filters = [random_filter(rng) for _ in range(60)]
    book.check(filters)
    with book.store.transaction():  # an edit that is then undone
        book.store.insert(110, [Passage(f"late{i}", "t", "x", {"a": "x", "b": i}) for i in range(7)], 3)
        book.store.mark_deleted([2, 3], 3)
    assert len(table_entries(book.store)) > len(expected_entries(book.metas))
    assert book.store.discard_after(110, 2) == 7 + 2
    book.check(filters)


def test_a_filter_searches_the_index_instead_of_scanning_the_passages(tmp_path):
    """(b): every statement a filter runs searches by key (the index of values, the deleted rows' index); the
    writes delete and insert the entries of the rows they change by primary key, never a scan of the table."""
    rng = np.random.default_rng(3)
    book = Book(tmp_path / "p.sqlite", rng)
    book.add(50)
    book.add(20)
    store = book.store
    statements: list[str] = []

    def plans() -> list[str]:
        details = [d for sql in statements for *_, d in store._db.execute("EXPLAIN QUERY PLAN " + sql)]
        statements.clear()
        return details

    store._db.set_trace_callback(statements.append)
    for where in (parse_where(["a=3"]), parse_where(["b^=x", "c>=0"]), parse_where(["d<=2026", "a=x"]),
                  Filter((Condition("e-f", "prefix", ("",)),))):
        store.filter_rows(where, 2, 70)
        details = plans()
        assert any(d.startswith(f"SEARCH {VALUES_TABLE} USING PRIMARY KEY") for d in details), details
        assert not any(d.startswith("SCAN") for d in details), details
    with store.transaction():
        store.set_meta([(5, {"a": "y"}), (6, None)])
        store.insert(70, [Passage("q", "t", "x", {"a": 1})], 3)
    store.discard_after(70, 2)
    statements[:] = [s for s in statements if s.split()[0] in ("INSERT", "DELETE", "UPDATE")]
    details = plans()
    assert any(d.startswith(f"SEARCH {VALUES_TABLE} USING PRIMARY KEY (field=? AND kind=? AND value=? AND row=?)")
               for d in details), details
    assert not any(d.startswith(("SCAN passages", f"SCAN {VALUES_TABLE}", "SCAN p ")) for d in details), details
    store._db.set_trace_callback(None)


def metas_of(kb: KnowledgeBase) -> dict[int, dict | None]:
    return {row: p.meta for row, p, _ in kb.store.iter_rows()}


def check_kb(kb: KnowledgeBase, filters) -> None:
    for where in filters:
        expected = [row for row, p in kb.live_rows() if where.matches(p.meta)]
        np.testing.assert_array_equal(kb.matching_rows(where), np.array(expected, dtype=np.int64), err_msg=str(where))


def tagged(passages: list[Passage], seed: int) -> list[Passage]:
    rng = np.random.default_rng(seed)
    return [Passage(p.id, p.title, p.text, random_meta(rng)) for p in passages]


def test_an_older_knowledge_base_filters_read_only_and_gains_the_index_at_its_first_edit(tmp_path, monkeypatch):
    """(c): a knowledge base written before the table (built with its creation disabled) filters by the JSON
    scan, read-only and unchanged; its first edit adds the table, filled from every row (the manifest's
    checksum covers it); an interrupted edit's recovery keeps it right."""
    rng = np.random.default_rng(5)
    filters = [random_filter(rng) for _ in range(40)] + [parse_where(["a=3"]), parse_where(["b^=x"])]
    with monkeypatch.context() as patch:
        patch.setattr(MetaMixin, "_ensure_meta_values", lambda self: None)
        kb = build(tmp_path / "kb", tagged(corpus(40), 1))
    store = kb.path / "passages.sqlite"
    kb.close()
    before = store.read_bytes()
    kb = KnowledgeBase.load(kb.path, verify="full")
    assert not kb.store._values and not has_table(store)
    check_kb(kb, filters)
    assert store.read_bytes() == before  # reading changed nothing

    kb.add(tagged(corpus(6, "more"), 2), encode)
    assert kb.store._values and has_table(store)
    assert table_entries(kb.store) == expected_entries(metas_of(kb))
    kb.verify()
    check_kb(kb, filters)
    kb.update([{"id": "doc:3", "text": "changed", "meta": {"a": "x", "b": 3.0}},
               {"id": "more:1", "text": "changed too", "set_meta": {"c": True}}], encode)
    kb.delete(["doc:4"])
    assert table_entries(kb.store) == expected_entries(metas_of(kb))
    check_kb(kb, filters + [parse_where(["a=x", "b=3"]), parse_where(["c=true"])])
    old_version = kb.at_version(1)
    check_kb(old_version, filters)
    old_version.close()
    kb.close()


def test_an_interrupted_edit_of_an_older_knowledge_base_is_recovered_with_the_index(tmp_path, monkeypatch):
    """(c, d): the first edit of an older knowledge base adds the table and is killed; the next edit's recovery
    drops the unfinished rows' entries (discard_after) and rewrites the store's checksum."""
    rng = np.random.default_rng(9)
    filters = [random_filter(rng) for _ in range(40)]
    with monkeypatch.context() as patch:
        patch.setattr(MetaMixin, "_ensure_meta_values", lambda self: None)
        kb = build(tmp_path / "kb", tagged(corpus(20), 3))
    kb.close()
    with monkeypatch.context() as patch:  # a killed process cannot clean up
        patch.setattr(kb_module, "_recover", lambda *args: None)
        with pytest.raises(Crash):
            add_passages(kb.path, tagged(corpus(10, "more"), 4), crashing_encoder(3, []), batch_size=2)
    left = KnowledgeBase.load(kb.path)
    assert "pending_edit" in left.manifest and left.store.num_rows() == 24 and left.store._values
    assert table_entries(left.store) == expected_entries(metas_of(left))  # the 4 unfinished rows' too
    check_kb(left, filters)  # the unfinished rows are not visible
    left.close()
    assert delete_passages(kb.path, ["doc:0"]) == 2
    after = KnowledgeBase.load(kb.path, verify="full")
    assert after.store.num_rows() == 20 and table_entries(after.store) == expected_entries(metas_of(after))
    check_kb(after, filters)
    after.close()


def test_a_resumed_build_of_an_older_work_store_is_byte_equal_with_the_index(tmp_path, monkeypatch):
    """(e): a build interrupted by an openbook without the table (its work store has none), resumed with it,
    and one whose resumed passages have new metadata (set_meta), give the bytes of an uninterrupted build."""
    given = tagged(corpus(30), 6)
    clean = build(tmp_path / "clean", given)
    assert has_table(clean.path / "passages.sqlite")
    assert table_entries(clean.store) == expected_entries(metas_of(clean)) != set()
    out = tmp_path / "kb"
    with monkeypatch.context() as patch:
        patch.setattr(MetaMixin, "_ensure_meta_values", lambda self: None)
        with pytest.raises(Crash):
            build(out, given, encode=crashing_encoder(4, []), resume=True)
    kb = build(out, given, resume=True)
    assert data_bytes(kb.path) == data_bytes(clean.path)

    touched = tagged(corpus(30), 8)  # the same texts, other metadata
    with pytest.raises(Crash):
        build(tmp_path / "touched", given, encode=crashing_encoder(5, []), resume=True)
    resumed = build(tmp_path / "touched", touched, resume=True)
    assert data_bytes(resumed.path) == data_bytes(build(tmp_path / "clean2", touched).path)
    assert table_entries(resumed.store) == expected_entries(metas_of(resumed))


def test_an_older_store_gains_the_index_in_its_first_write_transaction_only(tmp_path, monkeypatch):
    """(c): opening an older store writable adds nothing; a first write transaction that fails rolls the new
    table back with it (the store filters by the JSON scan still); one that commits leaves it complete."""
    rng = np.random.default_rng(13)
    metas = {row: random_meta(rng) for row in range(60)}
    path = tmp_path / "p.sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(MetaMixin, "_ensure_meta_values", lambda self: None)
        store = PassageStore.create(path)
        with store.transaction():
            store.insert(0, [Passage(f"p{r}", "t", "x", meta) for r, meta in metas.items()], 1)
        store.close()
    store = PassageStore.open(path, writable=True)
    assert not store._values and not has_table(path)
    with pytest.raises(Crash), store.transaction():
        assert store._values and table_entries(store) == expected_entries(metas)
        raise Crash("the first edit fails")
    assert not store._values and not has_table(path)
    filters = [random_filter(rng) for _ in range(30)]
    brute = {where: np.array([r for r, m in metas.items() if where.matches(m)], dtype=np.int64) for where in filters}
    for where in filters:
        np.testing.assert_array_equal(store.filter_rows(where, 1, 60), brute[where])
    with store.transaction():
        pass
    assert store._values and table_entries(store) == expected_entries(metas)
    for where in filters:
        np.testing.assert_array_equal(store.filter_rows(where, 1, 60), brute[where])
    store.close()


def test_integers_beyond_64_bits_filter_as_sqlite_reads_them(tmp_path):
    """An integer too big for SQLite (read from the JSON as a real) is stored and compared as a float, by the
    index and by the JSON scan alike, instead of failing to bind."""
    metas = {0: {"n": 10 ** 20}, 1: {"n": 1e20}, 2: {"n": 5}, 3: {"n": "100000000000000000000"}, 4: {"n": -10 ** 30}}
    store = PassageStore.create(tmp_path / "p.sqlite")
    with store.transaction():
        store.insert(0, [Passage(f"p{r}", "t", "x", meta) for r, meta in metas.items()], 1)
    store.close()
    shutil.copy(tmp_path / "p.sqlite", tmp_path / "copy.sqlite")
    store, old = PassageStore.open(tmp_path / "p.sqlite"), without_table(tmp_path / "copy.sqlite", tmp_path / "old.sqlite")
    for condition in (Condition("n", "eq", (10 ** 20, "100000000000000000000")), Condition("n", "gte", (10 ** 19,)),
                      Condition("n", "lte", (-10 ** 21,)), Condition("n", "eq", (-10 ** 30,))):
        where = Filter((condition,))
        expected = np.array([r for r, meta in metas.items() if where.matches(meta)], dtype=np.int64)
        assert len(expected)
        np.testing.assert_array_equal(store.filter_rows(where, 1, 5), expected)
        np.testing.assert_array_equal(old.filter_rows(where, 1, 5), expected)
