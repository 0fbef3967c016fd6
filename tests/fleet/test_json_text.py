"""Ingest reads and writes JSON with orjson on its hot path: the documents must be exactly
those ``json`` gives (same values, same types), whatever an agent sends."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.api import _loads
from fleet.lane import _dumps

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
    assert _typed(_loads(body)) == _typed(json.loads(body))


def test_bodies_orjson_refuses_read_as_json_reads_them():
    for body in (b'{"n": 123456789012345678901234567890}', b'{"n": -9223372036854775809}',
                 b'{"x": NaN}', b'"\\ud800"', b'\xef\xbb\xbf{"a": 1}',
                 '{"a": "\u00e9"}'.encode("utf-16")):
        assert repr(_loads(body)) == repr(json.loads(body))


@settings(max_examples=300, deadline=None)
@given(_DOCS)
def test_a_parameter_is_written_as_json_writes_it(doc):
    assert _typed(json.loads(_dumps(doc))) == _typed(json.loads(json.dumps(doc)))


def test_timestamps_and_big_integers_are_written():
    at = datetime(2026, 12, 1, 8, 30, 5, 250_000, tzinfo=UTC)
    assert json.loads(_dumps({"ts": at, "n": 2**70, 1: "x"})) == \
        {"ts": "2026-12-01T08:30:05.250000+00:00", "n": 2**70, "1": "x"}
