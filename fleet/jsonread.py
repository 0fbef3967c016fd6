"""JSON text read exactly as ``json.loads`` reads it, by orjson (a few times faster) where
the two agree: the agent's report bodies at ingest and the JSON the steady lane reads back
from PostgreSQL. Python's ``json`` decides what orjson refuses (NaN, lone surrogates, bytes
that are not UTF-8) and what orjson would read differently (an integer past 64 bits, which
orjson turns into a float)."""

from __future__ import annotations

import json
from typing import Any

import orjson

#: Every digit as "0", so that one ``bytes.find`` finds a run of them. A regular expression
#: restarts at every digit of a shorter run: on a 7 KB steady report of numbers it took
#: 68 us against 6 us, and 18 % of the request's instructions (callgrind).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def long_integer(body: bytes) -> bool:
    """True when ``body`` holds 19 digits in a row that do not follow a decimal point: an
    integer literal orjson would read past 64 bits as a float. Digits inside a string or an
    exponent count too, which only costs the slower parse; a fraction's do not (a latency
    histogram's sum such as 0.00026862887973265974, Python's shortest repr, is in 4 of 10
    steady reports)."""
    masked = body.translate(_DIGITS_AS_ZERO)
    start = masked.find(_LONG_RUN)
    while start != -1:  # the byte before a run is never a digit: find returns its first
        if start == 0 or masked[start - 1] != ord("."):
            return True
        end = start + len(_LONG_RUN)
        while end < len(masked) and masked[end] == ord("0"):
            end += 1
        start = masked.find(_LONG_RUN, end)
    return False


def loads(body: bytes) -> tuple[Any, bool]:
    """``(json.loads(body), strict)``: the same document, read by orjson (a few times faster)
    when it can be (``strict`` True: then the body holds no NaN/Infinity, no lone surrogate
    and only UTF-8, which orjson refuses): not for a body with a long integer
    (:func:`long_integer`), and not for one orjson refuses, where ``json`` decides and its
    error message is the one answered."""
    if not long_integer(body):
        try:
            return orjson.loads(body), True
        except orjson.JSONDecodeError:
            pass
    return json.loads(body), False



def read_json_columns(sender: object = None, connection: Any = None, **kwargs: object) -> None:
    """Receiver of Django's ``connection_created``: a PostgreSQL connection reads values of
    type ``json`` with :func:`loads` instead of psycopg's default ``json.loads`` (the same
    values, a few times faster). The steady lane's first statement returns each running
    server's metric snapshot (a few KB) as ``json``: 4 % of a steady request's instructions
    (callgrind). ``jsonb`` stays as Django registers it (text, read by the model fields)."""
    if connection is None or connection.vendor != "postgresql":
        return
    from psycopg.types.json import JsonLoader

    class _Loader(JsonLoader):
        _loads = staticmethod(_value)

    connection.connection.adapters.register_loader("json", _Loader)


def _value(data: bytes) -> Any:
    return loads(data)[0]
