"""Bad input at scale: hypothesis fuzz of the two parsers every report goes through.

* ``audit.kb.flags.parse_argv`` (+ ``effective_flags``): the server's command line as the
  agent read it from ``/proc``, which may be anything a user typed or a wrapper built;
* ``audit.kb.metrics.parse`` (+ ``window``): the raw ``/metrics`` body the server served.

A user notices two things, asserted on every input: the audit does not crash on the host's
input (both parsers promise never to raise; a crash would leave the report unevaluated),
and what could not be read is said clearly (an error naming the option, or the line number
and text of the bad /metrics line, never a silent wrong value).

Inputs: random token lists, structured command lines (real launchers and every known vLLM
option in its spellings, with good, bad, missing and placeholder values), mutations of the
real command lines of ``demo/data/cases/reports`` and of the real captures of
``demo/data/cases/metrics``. ``tests/audit/test_metrics_fuzz.py`` fuzzes the metrics parser
with other generators; this file adds the "clear error" properties.

FUZZ_EXAMPLES (env, default 1000) is hypothesis' max_examples per test; the target is at
least 10,000 inputs per parser: ``FUZZ_EXAMPLES=10000 pytest -p no:django tests/scale/
test_fuzz_parsers.py``. Pure Python: no database needed.
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.kb.effective import effective_flags
from audit.kb.flags import ParsedArgv, parse_argv
from audit.kb.metrics import MAX_ERRORS, MetricSnapshot, parse, window
from audit.kb.vllm_tables import releases, table, union_index
from demo.paths import capture_paths, report_paths

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
pytestmark = pytest.mark.slow

CASE_ARGVS = [json.loads(p.read_text())["argv"] for p in report_paths()]
CAPTURES = [p.read_text() for p in capture_paths()]
SMALL_CAPTURES = [text for text in CAPTURES if len(text) < 60_000]

LAUNCHERS = [
    [], ["vllm", "serve"], ["vllm", "serve", "google/gemma-4-31B-it"],
    ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    ["/usr/bin/python3", "/venv/bin/vllm", "serve"],
    ["python", "-m", "vllm.entrypoints.cli.main", "serve"],
    ["docker", "run", "--gpus", "all", "-v", "/m:/models", "vllm/vllm-openai:v0.25.1"],
    ["vllm/vllm-openai:latest"], ["vllm", "bench", "latency"], ["env", "A=1", "nohup", "vllm"],
]
LAUNCHER_NAMES = {"vllm serve", "api_server module", "cli module", "docker run",
                  "container args", "vllm bench", "unknown"}


def _numeric(release: str) -> dict[str, str]:
    """dest -> int|float for the plain numeric options of a release table."""
    return {o["dest"]: o["type"] for o in table(release)["options"].values()
            if o["type"] in ("int", "float") and not o["choices"]}


# Numeric in both releases the tests read with (0.25.1, and the newest for an unknown version).
_NUM_OLD, _NUM_NEW = _numeric("0.25.1"), _numeric(releases()[-1])
NUMERIC_KIND = {k: v for k, v in _NUM_OLD.items() if _NUM_NEW.get(k) == v}
NUMERIC = sorted(NUMERIC_KIND)
VALUES = ["0", "1", "-1", "8192", "8k", "8K", "1.5", "0.95", "true", "false", "auto", "<...>",
          "<model>", "REDACTED", '{"method": "eagle3", "num_speculative_tokens": 3}', "{",
          "image=1,video=0", "", " ", "\x00", "1e309", "nan", "--", "-", "=", "ünïcode"]
VERSIONS = [None, "0.5.1", "0.8.2", "0.10.1.dev101+gbda9d0535", "0.25.1", "0.29.0", "v0.22.0+cu129",
            "latest", "", "not a version", "99999999999999999999.0"]


def option_names() -> st.SearchStrategy[str]:
    """A known option in one of vLLM's spellings (dashes, underscores, alias, --no-)."""
    known = st.sampled_from(sorted({entry.dest for _, entry in union_index().values()}))
    spelled = st.tuples(known, st.sampled_from(["-", "_"])).map(lambda t: t[0].replace("_", t[1]))
    return st.one_of(
        spelled.map(lambda n: f"--{n}"), spelled.map(lambda n: f"--no-{n}"),
        st.sampled_from(sorted(s for s in union_index() if not s.startswith("--"))),
        st.sampled_from(["-O3", "--speculative-config.method", "--compilation-config.level",
                         "--unknown-flag", "--", "-"]),
        st.text(min_size=1, max_size=12).map(lambda t: f"--{t}"))


@st.composite
def option_tokens(draw: st.DrawFn) -> list[str]:
    """One option with an inline, separate, missing or odd value."""
    name = draw(option_names())
    value = draw(st.sampled_from(VALUES) | st.text(max_size=20))
    form = draw(st.sampled_from(["separate", "inline", "bare"]))
    return {"separate": [name, value], "inline": [f"{name}={value}"], "bare": [name]}[form]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A launcher followed by options and stray positionals."""
    argv = list(draw(st.sampled_from(LAUNCHERS)))
    for _ in range(draw(st.integers(0, 12))):
        argv += draw(option_tokens() | st.lists(st.text(max_size=15), max_size=1))
    return argv


@st.composite
def mutated_case_argvs(draw: st.DrawFn) -> list[str]:
    """A real command line of the cases with tokens deleted, duplicated, replaced or cut."""
    argv = [str(t) for t in draw(st.sampled_from(CASE_ARGVS))]
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(argv)))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "truncate", "replace"]))
        if op == "delete":
            argv = argv[:at] + argv[at + 1:]
        elif op == "insert":
            argv = argv[:at] + draw(option_tokens()) + argv[at:]
        elif op == "duplicate":
            argv = argv[:at] + argv[max(0, at - 2):at] + argv[at:]
        elif op == "truncate":
            argv = argv[:at]
        elif argv:
            argv[at % len(argv)] = draw(st.sampled_from(VALUES) | st.text(max_size=10))
    return argv


ANY_ARGV = st.one_of(st.lists(st.text(max_size=30), max_size=30), command_lines(),
                     mutated_case_argvs())


def check_argv(argv: list[str], version: str | None, gib: float | None,
               gpu: str | None) -> ParsedArgv:
    parsed = parse_argv(argv)
    assert isinstance(parsed, ParsedArgv)
    assert parsed.launcher in LAUNCHER_NAMES
    assert all(isinstance(e, str) and e.strip() for e in parsed.errors)
    flags, meta = effective_flags(parsed, version, gib, gpu)
    assert set(parsed.values) <= set(flags)  # what argv set is in the effective config
    assert set(parsed.values) <= set(meta["sources"])  # and says where it came from
    # the parser's errors, then one "treated as unset" note per unusable number
    assert meta["errors"][:len(parsed.errors)] == parsed.errors
    assert all("treated as unset" in e for e in meta["errors"][len(parsed.errors):])
    return parsed


@FUZZ
@given(ANY_ARGV, st.sampled_from(VERSIONS) | st.text(max_size=12),
       st.none() | st.floats(allow_nan=True, allow_infinity=True),
       st.none() | st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ""]))
def test_the_argv_parser_never_crashes_and_explains_what_it_skipped(
        argv: list[str], version: str | None, gib: float | None, gpu: str | None) -> None:
    check_argv(argv, version, gib, gpu)


@FUZZ
@given(st.sampled_from(NUMERIC), st.text(min_size=1, max_size=20).filter(
    lambda v: not re.fullmatch(r"\s*-?\d+(\.\d+)?([kKmMgG])?\s*", v) and not v.startswith("-")
    and not (v.startswith("<") and v.endswith(">")) and v.lower() not in ("auto", "nan", "inf",
                                                                         "infinity", "-1")),
    st.booleans())
def test_a_bad_number_is_kept_raw_with_an_error_naming_its_option(
        key: str, value: str, inline: bool) -> None:
    option = f"--{key.replace('_', '-')}"
    tokens = [f"{option}={value}"] if inline else [option, value]
    parsed = check_argv(["vllm", "serve", "some/model", *tokens], "0.25.1", 80.0, None)
    if NUMERIC_KIND[key] == "float":
        try:
            float(value)
            return  # Python floats accept forms like "1_0" or "  .5 "; those are numbers
        except ValueError:
            pass
    assert parsed.values[key] == value  # never silently replaced by a default
    assert any(f"--{key}" in error and "not a number" in error for error in parsed.errors)


@FUZZ
@given(st.sampled_from(NUMERIC), st.integers(0, 2**40), st.sampled_from(["-", "_"]))
def test_a_good_number_reads_back_exactly_in_either_spelling(
        key: str, number: int, sep: str) -> None:
    parsed = check_argv(["vllm", "serve", "m", f"--{key.replace('_', sep)}", str(number)],
                        None, None, None)
    assert parsed.values[key] == number
    assert not parsed.errors


@FUZZ
@given(st.sampled_from(NUMERIC), st.sampled_from(["--max-model-len", "--port", None]))
def test_an_option_without_its_value_is_reported_not_guessed(key: str, follower: str) -> None:
    option = f"--{key.replace('_', '-')}"
    argv = ["vllm", "serve", "m", option] + ([follower, "8"] if follower else [])
    parsed = check_argv(argv, "0.25.1", None, None)
    assert key not in parsed.values or key == follower.lstrip("-").replace("-", "_")
    assert any(option.replace("-", "_")[2:] in e.replace("-", "_") and "missing value" in e
               for e in parsed.errors)


# --------------------------------------------------------------------------- /metrics


@st.composite
def mutated_captures(draw: st.DrawFn) -> str:
    """A real capture with bytes deleted, junk inserted, lines duplicated or cut."""
    text = draw(st.sampled_from(SMALL_CAPTURES))
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["delete", "insert", "truncate", "duplicate"]))
        if op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 100)):]
        elif op == "insert":
            text = text[:at] + draw(st.text(max_size=40)) + text[at:]
        elif op == "truncate":
            text = text[:at]
        else:
            text = text[:at] + text[max(0, at - 200):at] + text[at:]
    return text


def check_snapshot(snap: MetricSnapshot) -> None:
    assert isinstance(snap, MetricSnapshot)
    assert all(isinstance(e, str) and e.strip() for e in snap.errors)
    assert len(snap.errors) <= MAX_ERRORS + 1
    assert not [e for e in snap.errors if e.startswith("internal error")]
    assert all(math.isfinite(v) for v in snap.counters.values())
    json.dumps(window(None, snap, None))
    json.dumps(window(snap, snap, 30.0))


@FUZZ
@given(st.one_of(st.text(max_size=3000), st.binary(max_size=1000), mutated_captures()))
def test_the_metrics_parser_never_crashes_on_any_body(text: str | bytes) -> None:
    check_snapshot(parse(text))


@FUZZ
@given(st.sampled_from(SMALL_CAPTURES),
       st.lists(st.tuples(st.integers(0, 100_000),
                          st.text(max_size=30).filter(lambda s: "\n" not in s and "\r" not in s)),
                min_size=1, max_size=MAX_ERRORS))
def test_each_broken_metrics_line_is_reported_with_its_line_number_and_text(
        text: str, inserts: list[tuple[int, str]]) -> None:
    lines = text.split("\n")
    for at, junk in inserts:  # a mapped name with an unterminated label set never parses
        lines.insert(at % (len(lines) + 1), "vllm:num_requests_running{junk=" + junk)
    snap = parse("\n".join(lines))
    check_snapshot(snap)
    broken = [n for n, line in enumerate(lines, start=1)
              if line.startswith("vllm:num_requests_running{junk=")]
    for number in broken:
        assert any(e.startswith(f"line {number} skipped") and "junk=" in e for e in snap.errors)
