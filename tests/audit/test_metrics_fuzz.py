"""Property-based fuzz of audit.kb.metrics: random and mutated /metrics text never breaks it.

FUZZ_EXAMPLES (env, default 500) sets hypothesis' max_examples per property; the
target is 10,000+.
"""

from __future__ import annotations

import json
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.kb.metrics import MAX_ERRORS, MetricSnapshot, parse, window
from audit.kb.metrics_names import SAMPLE_INDEX
from demo.paths import capture_paths

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,  # keep the tree clean; failures print their falsifying example anyway
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CAPTURES = [p.read_text() for p in capture_paths()]  # never empty: raises when data is missing
SMALL_CAPTURES = [text for text in CAPTURES if len(text) < 60_000]

NAMES = sorted(SAMPLE_INDEX) + ["vllm:", "vllm_num_requests_running", "vllm:x_bucket", "http_x"]
LABEL_KEYS = ["engine", "model_name", "le", "position", "finished_reason", "", "a b", "__x"]
VALUES = ["0", "1", "-1", "1.5", "NaN", "+Inf", "-Inf", "1e+06", "1e400", "abc", "", "0x10"]
WINDOW_KEYS = {"window_kind", "missing", "errors", "ttft_p50_s", "spec_per_position"}


@st.composite
def label_sets(draw: st.DrawFn) -> str:
    pairs = draw(st.lists(st.tuples(st.sampled_from(LABEL_KEYS), st.text(max_size=12)),
                          max_size=4))  # fmt: skip
    body = ",".join(f'{k}="{v}"' for k, v in pairs)
    return draw(st.sampled_from(["", "{" + body + "}", "{" + body, "{}"]))


@st.composite
def exposition_lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES) | st.text(max_size=15))
    value = draw(st.sampled_from(VALUES) | st.floats(allow_nan=True).map(repr))
    stamp = draw(st.sampled_from(["", " 1700000000", " x"]))
    prefix = draw(st.sampled_from(["", "", "# TYPE ", "# HELP ", " ", "\t"]))
    return f"{prefix}{name}{draw(label_sets())} {value}{stamp}"


@st.composite
def mutated_captures(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SMALL_CAPTURES))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "line", "truncate", "duplicate"]))
        if op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 200)) :]
        elif op == "insert":
            text = text[:at] + draw(st.text(max_size=30)) + text[at:]
        elif op == "line":
            text = text[:at] + "\n" + draw(exposition_lines()) + "\n" + text[at:]
        elif op == "truncate":
            text = text[:at]
        else:
            text = text[:at] + text[max(0, at - 300) : at] + text[at:]
    return text


def check(snap: MetricSnapshot) -> None:
    assert isinstance(snap, MetricSnapshot)
    assert len(snap.errors) <= MAX_ERRORS + 1
    # parse() has a last-resort guard; reaching it would mean a bug the guard is hiding
    assert not [e for e in snap.errors if e.startswith("internal error")]
    assert all(math.isfinite(v) for v in snap.counters.values())
    for w in (window(None, snap, None), window(snap, snap, 10.0)):
        assert set(w) >= WINDOW_KEYS
        json.dumps(w)  # the window goes into a JSON context as is


@FUZZ
@given(st.text(max_size=2000) | st.binary(max_size=500))
def test_random_text_never_raises(text: str | bytes) -> None:
    check(parse(text))


@FUZZ
@given(st.lists(exposition_lines(), max_size=40))
def test_random_exposition_lines_never_raise(lines: list[str]) -> None:
    snap = parse("\n".join(lines))
    check(snap)
    window(parse("\n".join(reversed(lines))), snap, 1.0)


@FUZZ
@given(mutated_captures(), st.sampled_from(SMALL_CAPTURES), st.floats(allow_nan=True))
def test_mutated_captures_never_raise(text: str, other: str, elapsed: float) -> None:
    snap = parse(text)
    check(snap)
    json.dumps(window(parse(other), snap, elapsed))


@FUZZ
@given(
    st.sampled_from(SMALL_CAPTURES),
    st.lists(st.tuples(st.integers(0, 10_000), st.text(max_size=40).filter(
        lambda s: "}" not in s and "\n" not in s)), min_size=1, max_size=5),
)  # fmt: skip
def test_broken_lines_lose_only_themselves(text: str, inserts: list[tuple[int, str]]) -> None:
    lines = text.split("\n")
    for at, junk in inserts:  # a mapped name with an unterminated label set cannot parse
        lines.insert(at % (len(lines) + 1), "vllm:num_requests_running{" + junk)
    original, broken = parse(text), parse("\n".join(lines))
    assert broken.counters == original.counters
    assert broken.gauges == original.gauges
    assert broken.histograms == original.histograms
    assert broken.cache_config == original.cache_config
    assert broken.errors
