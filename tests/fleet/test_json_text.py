"""Ingest reads and writes JSON with orjson on its hot path: the documents must be exactly
those ``json`` gives (same values, same types), whatever an agent sends."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.jsonread import loads as _loads
from fleet.lane import _dumps
from fleet_agent.schema import json_problems, shallow_text

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text())
_DOCS = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=30)


def _typed(value):
    """``value`` with each number tagged by its type: 1 and 1.0 compare equal in Python."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


@settings(max_examples=300, deadline=None)
@given(_DOCS, st.sampled_from([{}, {"indent": 1}, {"ensure_ascii": False}]))
def test_a_body_reads_as_json_reads_it(doc, style):
    body = json.dumps(doc, **style).encode()
    assert _typed(_loads(body)[0]) == _typed(json.loads(body))


def test_bodies_orjson_refuses_read_as_json_reads_them():
    for body in (b'{"n": 123456789012345678901234567890}', b'{"n": -9223372036854775809}',
                 b'{"x": NaN}', b'"\\ud800"', b'\xef\xbb\xbf{"a": 1}',
                 '{"a": "\u00e9"}'.encode("utf-16")):
        assert repr(_loads(body)[0]) == repr(json.loads(body))
        assert _loads(body)[1] is False  # json read it: the full checks run


def test_a_long_fraction_is_read_by_orjson_a_long_integer_is_not():
    """Python writes small floats with 20 digits after the point (a latency histogram's sum):
    they are no integer past 64 bits, so the fast reading and the short checks apply."""
    body = b'{"sum": 0.00026862887973265974, "e": 1.5e-07, "n": 12345678901234567}'
    assert _loads(body) == (json.loads(body), True)
    for integer in (b"-1234567890123456789012", b"12345678901234567890", b"1e1234567890123456789",
                    b"[0.00026862887973265974, 12345678901234567890]"):
        assert _loads(b'{"n": ' + integer + b"}")[1] is False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-(10**25), max_value=10**25)
                | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e-3,
                            max_value=1e-3), max_size=6))
def test_numbers_near_the_64_bit_edge_read_as_json_reads_them(numbers):
    body = json.dumps(numbers).encode()
    assert _typed(_loads(body)[0]) == _typed(json.loads(body))


@settings(max_examples=300, deadline=None)
@given(_DOCS)
def test_a_parameter_is_written_as_json_writes_it(doc):
    assert _typed(json.loads(_dumps(doc))) == _typed(json.loads(json.dumps(doc)))


def test_timestamps_and_big_integers_are_written():
    at = datetime(2026, 12, 1, 8, 30, 5, 250_000, tzinfo=UTC)
    assert json.loads(_dumps({"ts": at, "n": 2**70, 1: "x"})) == \
        {"ts": "2026-12-01T08:30:05.250000+00:00", "n": 2**70, "1": "x"}


_HOSTILE = st.recursive(
    _SCALARS | st.sampled_from([float("nan"), float("inf"), "\x00", "\ud800", "a\\\"b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=4) | st.just("\x00"), inner, max_size=3), max_leaves=60)


@settings(max_examples=400, deadline=None)
@given(_HOSTILE | st.integers(30, 40).map(lambda n: json.loads("[" * n + "]" * n)))
def test_what_strict_reading_leaves_to_check_is_the_depth(doc):
    """When orjson read a body without an escaped NUL and its text is shallow, the contract's
    JSON checks find nothing: the ingest may skip them (``parse_report(json_checked=True)``)."""
    try:
        body = json.dumps(doc).encode()
    except ValueError:
        return
    parsed, strict = _loads(body)
    if strict and b"\\u0000" not in body and shallow_text(body.decode()):
        assert json_problems(parsed) == []


@pytest.mark.django_db
def test_json_values_from_postgresql_read_as_json_reads_them():
    """The steady lane reads each running server's metric snapshot back as a ``json`` value;
    orjson reads it where it agrees with ``json``, and an integer past 64 bits stays an
    integer (orjson alone would make it a float)."""
    if connection.vendor != "postgresql":
        pytest.fail("needs PostgreSQL (run `make test`)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT json_build_array(1, 123456789012345678901234567890, 0.25, "
                       "'caf\u00e9', json_build_object('k', null))")
        value = cursor.fetchone()[0]
    assert repr(value) == repr([1, 123456789012345678901234567890, 0.25, "caf\u00e9",
                                {"k": None}])
