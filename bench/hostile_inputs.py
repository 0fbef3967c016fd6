"""Benchmark: the cost of the largest hostile inputs the caps still let through (not a test).

Targets: no single accepted report may tie up a web worker or an evaluation.
Measured here, each against a same-run baseline of a real-sized body:

- ``audit.kb.metrics.parse`` of a /metrics body at the ingest cap (``MAX_METRICS_CHARS``) made of
  ``vllm:`` lines full of escaped quotes, each at the ingest's per-line cap
  (``MAX_METRICS_LINE_CHARS``, skipped by the parser) or just under the parser's own line cap
  (``metrics.MAX_LINE_CHARS``, parsed): before the parser's line cap, one 2 MB line of ``\\"``
  cost 25 s (quadratic); target: under 1 s;
- ``fleet_agent.schema.parse_report`` of a report at every count cap (``MAX_SERVERS`` servers,
  ``MAX_GPUS`` GPUs, ``MAX_LABELS`` labels) against a one-server report; target: under 1 s;
- the same check refusing 20,000 GPUs (422); target: under 1 s.

Run: ``.venv/bin/python bench/hostile_inputs.py [--runs 5]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from audit.kb import metrics  # noqa: E402
from fleet_agent import schema  # noqa: E402

TARGET_S = 1.0
_LINE = 'vllm:num_requests_running{model_name="m",engine="0"} 1\n'


def median_s(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``fn`` over ``runs`` calls, seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hostile_metrics(line_chars: int) -> str:
    """``vllm:`` lines of escaped quotes, ``line_chars`` long, up to the body cap."""
    inner = (line_chars - 60) // 2
    line = 'vllm:num_requests_running{model_name="' + '\\"' * inner + '"} 1\n'
    return line * (schema.MAX_METRICS_CHARS // len(line))


def report(servers: int, gpus: int, labels: int) -> dict:
    """A contract report with these counts."""
    return {
        "schema_version": 1, "report_id": str(uuid.uuid4()),
        "collected_at": "2026-01-01T00:00:00Z",
        "agent": {"version": "0.1.0", "interval_s": 30},
        "host": {"hostname": "h", "machine_id": "m",
                 "labels": {f"k{i}": "v" for i in range(labels)}},
        "gpus": [{"index": i % 100, "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3",
                  "memory_total_bytes": 85520809984} for i in range(gpus)],
        "servers": [{"pid": i + 1, "argv": ["vllm", "serve", "m", "--port", str(8000 + i)],
                     "env": {"CUDA_VISIBLE_DEVICES": "0"}} for i in range(servers)],
    }


def _refused(data: dict) -> None:
    try:
        schema.parse_report(data)
    except schema.ReportError:
        return
    raise AssertionError("20,000 GPUs were accepted")


def main() -> None:
    """Print medians against the baselines and the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    real = _LINE * 1000
    at_ingest_cap = hostile_metrics(schema.MAX_METRICS_LINE_CHARS)
    at_parser_cap = hostile_metrics(metrics.MAX_LINE_CHARS)
    dense_line = "vllm:num_requests_running{" + ",".join(f'l{i}="v"' for i in range(440)) \
        + "} 1\n"
    dense = dense_line * (schema.MAX_METRICS_CHARS // len(dense_line))
    rows = [
        ("metrics.parse, 1,000 real lines (baseline)", lambda: metrics.parse(real)),
        (f"metrics.parse, {len(at_ingest_cap) / 2**20:.1f} MiB of 64 KiB escaped-quote lines",
         lambda: metrics.parse(at_ingest_cap)),
        (f"metrics.parse, {len(at_parser_cap) / 2**20:.1f} MiB of 4 KiB escaped-quote lines",
         lambda: metrics.parse(at_parser_cap)),
        (f"metrics.parse, {len(dense) / 2**20:.1f} MiB of 440-label lines (MAX_SAMPLE_CHARS)",
         lambda: metrics.parse(dense)),
        ("parse_report, 1 server (baseline)", lambda: schema.parse_report(report(1, 1, 0))),
        (f"parse_report at the caps ({schema.MAX_SERVERS} servers, {schema.MAX_GPUS} GPUs)",
         lambda: schema.parse_report(report(schema.MAX_SERVERS, schema.MAX_GPUS,
                                            schema.MAX_LABELS))),
        ("parse_report refusing 20,000 GPUs", lambda: _refused(report(1, 20_000, 0))),
    ]
    for label, fn in rows:
        seconds = median_s(fn, args.runs)
        verdict = "ok" if seconds < TARGET_S else f"OVER the {TARGET_S:.0f} s target"
        print(f"{label:70s} {seconds * 1000:9.1f} ms  {verdict}")


if __name__ == "__main__":
    main()
