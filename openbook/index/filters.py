"""Metadata filters: the exact top k among the passages whose metadata (``Passage.meta``) matches.

A :class:`Filter` is a conjunction of :class:`Condition` s on metadata fields, each one of

* ``eq`` -- the field equals a value (a string, number or boolean; a number matches numbers only, a
  string strings only, except that the command line's ``page=3`` matches the number 3 and the string "3");
* ``prefix`` -- the field is a string starting with a prefix;
* ``gte`` / ``lte`` -- the field is at least / at most a bound: numbers compare numerically with a number
  bound, strings (ISO 8601 dates such as ``2026-01-01`` or ``2026-11-27T12:00:00Z``) as strings with a
  string bound. A passage without the field, or with a value of the other kind, does not match.

It is written two ways, parsed here into the same type:

* the command line (``openbook retrieve/ask --where``, :func:`parse_where`): ``FIELD=VALUE``,
  ``FIELD^=PREFIX``, ``FIELD>=X``, ``FIELD<=X``; repeated conditions are ANDed;
* JSON (the API's ``"filter"``, :func:`parse_filter`): ``{"source": "a.md", "page": 3,
  "modified": {"gte": "2026-01-01", "lte": "2026-12-31"}, "section": {"prefix": "Intro"}}``: a field
  maps to a value (equality) or to an object of operators (``eq``, ``prefix``, ``gte``, ``lte``).

The matching rows come from the passage store (its index of metadata values, ``passage_meta_values``, or
in an older store opened read-only ``json_extract`` on every row's ``meta``: :mod:`openbook.index.store_meta`),
at the knowledge base's version, live rows only (``KnowledgeBase.matching_rows``). The dense search over them
is exact whatever the index (:func:`openbook.index.exact.exact_search`: inner products with their stored
vectors in ``embeddings.npy``), so an approximate index (HNSW, IVF-PQ) gives the exact filtered top k too;
its cost grows with the number of matching passages. Without a filter nothing here runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openbook.errors import InputError
from openbook.index.store_meta import bindable

OPERATORS = ("eq", "prefix", "gte", "lte")
CLI_OPERATORS = {"=": "eq", "^=": "prefix", ">=": "gte", "<=": "lte"}
SYMBOLS = {op: symbol for symbol, op in CLI_OPERATORS.items()}
FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
MAX_CONDITIONS = 32
MAX_VALUE_CHARS = 1000


class FilterError(InputError):
    """A filter that is malformed, or that no passage matches; ``field`` names the part at fault in the JSON form
    (``filter.modified.gte``), for the API's error."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Condition:
    """One test of a metadata field: ``op`` (one of :data:`OPERATORS`) against ``values`` (``eq``: any of
    them; the others: exactly one)."""

    field: str
    op: str
    values: tuple

    def describe(self) -> str:
        shown = self.values[0] if isinstance(self.values[0], str) or len(self.values) == 1 else self.values[1]
        return f"{self.field}{SYMBOLS[self.op]}{shown}"

    def matches(self, meta: dict[str, Any] | None) -> bool:
        """Whether ``meta`` passes (the same test as the SQL of :func:`matching_rows`)."""
        if not meta or self.field not in meta:
            return False
        value = meta[self.field]
        if self.op == "eq":
            return any(_same_kind(value, v) and value == v for v in self.values)
        bound = self.values[0]
        if self.op == "prefix":
            return isinstance(value, str) and value.startswith(bound)
        if not _same_kind(value, bound):
            return False
        return value >= bound if self.op == "gte" else value <= bound


def _same_kind(value: Any, bound: Any) -> bool:
    if isinstance(value, bool) or isinstance(bound, bool):
        return isinstance(value, bool) and isinstance(bound, bool)
    if isinstance(value, str) or isinstance(bound, str):
        return isinstance(value, str) and isinstance(bound, str)
    return True  # two numbers


@dataclass(frozen=True)
class Filter:
    """A conjunction of conditions on passage metadata (module docs). Hashable: requests with equal filters
    can share a batch."""

    conditions: tuple[Condition, ...]

    def describe(self) -> str:
        return " AND ".join(c.describe() for c in self.conditions)

    def matches(self, meta: dict[str, Any] | None) -> bool:
        return all(c.matches(meta) for c in self.conditions)

    def sql(self) -> tuple[str, list]:
        """``(SQL condition on the passages table, its parameters)``: the JSON scan of a store without the index
        of metadata values (:mod:`openbook.index.store_meta`)."""
        parts, params = [], []
        for condition in self.conditions:
            text, values = _condition_sql(condition)
            parts.append(text)
            params.extend(values)
        return " AND ".join(parts), params


def _condition_sql(c: Condition) -> tuple[str, list]:
    path = f'$."{c.field}"'
    kind, value = "json_type(meta, ?)", "json_extract(meta, ?)"
    if c.op == "eq":
        alternatives, params = [], []
        for v in c.values:
            if isinstance(v, bool):
                alternatives.append(f"{kind} = ?")
                params += [path, "true" if v else "false"]
            else:
                types = "= 'text'" if isinstance(v, str) else "IN ('integer', 'real')"
                alternatives.append(f"({kind} {types} AND {value} = ?)")
                params += [path, path, bindable(v)]
        return "(" + " OR ".join(alternatives) + ")", params
    bound = c.values[0]
    types = "= 'text'" if isinstance(bound, str) else "IN ('integer', 'real')"
    if c.op == "prefix":
        return f"({kind} {types} AND substr({value}, 1, ?) = ?)", [path, path, len(bound), bound]
    return f"({kind} {types} AND {value} {'>=' if c.op == 'gte' else '<='} ?)", [path, path, bindable(bound)]


# ---------------------------------------------------------------------------------------------------
# parsing


def _check_field(field: Any, where: str) -> str:
    if not isinstance(field, str) or not FIELD.fullmatch(field):
        raise FilterError(f"{where}: field {field!r} must be letters, digits, '_' or '-' (starting with a letter or "
                         f"'_', at most 100 characters)", where)
    return field


def _check_value(value: Any, op: str, where: str) -> Any:
    problem = None
    if op == "prefix" and not isinstance(value, str):
        problem = f"a prefix must be a string, got {value!r}"
    elif op in ("gte", "lte") and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
        problem = f"a bound must be a number or a string (an ISO date), got {value!r}"
    elif not isinstance(value, (str, int, float, bool)):
        problem = f"the value must be a string, number or boolean, got {type(value).__name__}"
    elif isinstance(value, float) and not math.isfinite(value):
        problem = f"the value must be a finite number, got {value!r}"
    elif isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        problem = f"the value is longer than {MAX_VALUE_CHARS} characters"
    elif isinstance(value, str) and ("\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)):
        problem = "the value is not valid text (a NUL character or a lone surrogate)"
    if problem is not None:
        raise FilterError(f"{where}: {problem}", where)
    return value


def _number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if kind is int or math.isfinite(value) else None  # an int of any size is a number
    return None


def parse_condition(expression: str) -> Condition:
    """One ``--where`` expression (``FIELD=VALUE``, ``FIELD^=PREFIX``, ``FIELD>=X``, ``FIELD<=X``) as a
    :class:`Condition`; InputError naming the expression if it is malformed."""
    where = f"--where {expression!r}"
    match = re.search(r"\^=|>=|<=|[=<>^!~]", expression)
    if match is None:
        raise FilterError(f"{where}: expected FIELD=VALUE, FIELD^=PREFIX, FIELD>=X or FIELD<=X")
    symbol = match.group()
    if symbol not in CLI_OPERATORS:
        raise FilterError(f"{where}: unknown operator {expression[match.start():match.start() + 2]!r}; use =, ^=, "
                         f">= or <=")
    field, text = _check_field(expression[:match.start()].strip(), where), expression[match.end():].strip()
    op = CLI_OPERATORS[symbol]
    if op != "eq" and not text:
        raise FilterError(f"{where}: no value after {symbol}")
    _check_value(text, "eq", where)
    number = _number(text)
    if op == "eq":
        lowered = text.lower()
        typed = True if lowered == "true" else False if lowered == "false" else number
        return Condition(field, op, (text,) if typed is None else (typed, text))
    if op in ("gte", "lte") and number is not None:
        return Condition(field, op, (number,))
    return Condition(field, op, (text,))


def parse_where(expressions: Sequence[str] | None) -> Filter | None:
    """The ``--where`` expressions, ANDed, as a :class:`Filter` (None when there are none)."""
    if not expressions:
        return None
    if len(expressions) > MAX_CONDITIONS:
        raise FilterError(f"--where: at most {MAX_CONDITIONS} conditions, got {len(expressions)}")
    return Filter(tuple(parse_condition(e) for e in expressions))


def parse_filter(spec: Any, name: str = "filter") -> Filter | None:
    """The JSON form (module docs) as a :class:`Filter` (None for an empty or null one); InputError naming
    the field at fault (``filter.modified.gte``)."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise FilterError(f"{name}: must be an object of FIELD: VALUE or FIELD: {{OPERATOR: VALUE}}", name)
    conditions = []
    for field, test in spec.items():
        where = f"{name}.{field}"
        _check_field(field, where)
        tests = test if isinstance(test, dict) else {"eq": test}
        if not tests:
            raise FilterError(f"{where}: give at least one of {', '.join(OPERATORS)}", where)
        for op, value in tests.items():
            if op not in OPERATORS:
                raise FilterError(f"{where}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}", where)
            conditions.append(Condition(field, op, (_check_value(value, op, f"{where}.{op}"),)))
    if len(conditions) > MAX_CONDITIONS:
        raise FilterError(f"{name}: at most {MAX_CONDITIONS} conditions, got {len(conditions)}", name)
    return Filter(tuple(conditions)) if conditions else None


def as_filter(where: Filter | dict | str | Sequence[str] | None) -> Filter | None:
    """``where`` as Python callers give it: a :class:`Filter`, the JSON form (a dict), or ``--where``
    expressions (a string or a list of them)."""
    if where is None or isinstance(where, Filter):
        return where
    if isinstance(where, dict):
        return parse_filter(where, "where")
    if isinstance(where, str):
        return parse_where([where])
    if isinstance(where, Sequence) and all(isinstance(e, str) for e in where):
        return parse_where(list(where))
    raise InputError(f"where must be a dict, FIELD=VALUE strings or a Filter, not {type(where).__name__}")


# ---------------------------------------------------------------------------------------------------
# searching


def no_match(where: Filter, path: Any) -> FilterError:
    return FilterError(f"no passage of knowledge base {path} matches the filter {where.describe()}", "filter")

