"""Benchmark: parse a real-sized vLLM /metrics body and derive its windows (not a test).

Target: building one server's context, including parsing a real-sized /metrics
(1,000+ lines), under 10 ms median. This script times the metrics share of that budget:
`parse()` of the current scrape plus the lifetime and delta `window()`s, on

- the largest real capture (lmswitch, DeepSeek-V4 MTP, 712 lines, 75 KB), and
- the same capture as a data-parallel size 2 server would expose it (every `engine="0"` series
  repeated for `engine="1"`), which passes the 1,000-line mark.

Each is compared with a baseline measured in the same run: prometheus_client's bare
`text_string_to_metric_families` over the same text, consuming every sample.

Run: `.venv/bin/python bench/context_metrics.py [--runs 200]`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: make `audit` importable

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from audit.kb.metrics import parse, window  # noqa: E402

CASES = ROOT / "demo" / "data" / "cases" / "metrics"
CAPTURE = "lmswitch-fixture_2026-09-custom_dsv4-flash-mtp6.prom"
TARGET_MS = 10.0  # whole context build, median


def dp2(text: str) -> str:
    """The capture as a DP=2 server exposes it: each engine-0 vLLM series also for engine 1."""
    extra = [line.replace('engine="0"', 'engine="1"') for line in text.splitlines()
             if line.startswith("vllm:") and 'engine="0"' in line]  # fmt: skip
    return text + "\n".join(extra) + "\n"


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm caches and imports
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def bench(label: str, text: str, runs: int) -> None:
    prev = parse(text)  # the previous report's snapshot (the caller would have it from history)

    def baseline() -> int:
        return sum(len(f.samples) for f in text_string_to_metric_families(text))

    def ours() -> None:
        cur = parse(text)
        window(None, cur, None)
        window(prev, cur, 30.0)

    base_ms = median_ms(baseline, runs)
    parse_ms = median_ms(lambda: parse(text), runs)
    ours_ms = median_ms(ours, runs)
    lines = text.count("\n")
    print(f"{label}: {lines} lines, {len(text) / 1024:.0f} KiB, {baseline()} samples")
    print(f"  baseline prometheus_client bare parse : {base_ms:7.2f} ms median")
    print(f"  audit.kb.metrics parse()              : {parse_ms:7.2f} ms median")
    print(
        f"  parse() + lifetime + delta window()   : {ours_ms:7.2f} ms median"
        f"  = {ours_ms / base_ms:.2f}x baseline, {ours_ms / TARGET_MS:.0%} of the "
        f"{TARGET_MS:.0f} ms context target"
    )


def main() -> None:
    """Print medians and ratios for the real capture and its DP=2 variant."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="timed runs per measurement")
    args = ap.parse_args()
    text = (CASES / CAPTURE).read_text()
    bench(f"{CAPTURE} (real)", text, args.runs)
    bench("same capture as DP=2 (engine 0 + 1)", dp2(text), args.runs)


if __name__ == "__main__":
    main()
