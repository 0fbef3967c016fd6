"""Benchmark: one agent collection cycle on a fake node with four vLLM servers.

Not a test. Builds the Gemma node of ``tests/agent/fa_gemma.py`` (four API servers with
their EngineCore/worker children, real ``/metrics`` captures served by local emulators),
then runs the agent in a separate process (so the emulators' CPU is not counted) and
prints, against the issue-3 targets (150 ms CPU per cycle, 60 MB RSS, 40 KB gzipped
report per server):

* CPU time of the first cycle (includes lazy imports) and the median of later cycles;
* peak RSS of the agent process;
* gzipped report size per server;
* a baseline measured in the same run: ``json.dumps`` + gzip of the same report data
  (the floor any agent pays to ship it), and the gzipped size of the bare /metrics texts.

Run: ``.venv/bin/python bench/agent_cycle.py [--cycles N]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "agent"))

TARGET_CPU_MS = 150.0
TARGET_RSS_MB = 60.0
TARGET_GZ_PER_SERVER_KB = 40.0


def child(root: str, gpu_source: str, cycles: int) -> None:
    """Run ``cycles`` collections in this process; print measurements as one JSON line."""
    from fleet_agent.collect import CycleInput, collect
    from fleet_agent.config import AgentConfig

    cpu_ms: list[float] = []
    report = None
    for _ in range(cycles):
        start = time.process_time()
        report = collect(CycleInput(config=AgentConfig(), root=Path(root), gpu_source=gpu_source))
        body = gzip.compress(report.model_dump_json().encode(), compresslevel=6)
        cpu_ms.append((time.process_time() - start) * 1000)
    assert report is not None
    data = report.model_dump(mode="json")
    start = time.process_time()
    for _ in range(cycles):
        baseline_gz = gzip.compress(json.dumps(data).encode(), compresslevel=6)
    baseline_ms = (time.process_time() - start) * 1000 / cycles
    metrics_gz = [len(gzip.compress(s["metrics"]["text"].encode(), compresslevel=6))
                  for s in data["servers"] if s.get("metrics")]
    print(json.dumps({
        "cpu_ms": cpu_ms, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "servers": len(data["servers"]), "report_gz": len(body), "report_raw":
        len(report.model_dump_json()), "baseline_ms": baseline_ms,
        "baseline_gz": len(baseline_gz), "metrics_gz": metrics_gz,
        "errors": [e for s in data["servers"] for e in s["errors"]],
    }))


def parent(cycles: int) -> None:
    """Build the node, run the child, print figures and ratios."""
    from fa_fakenode import FakeNode
    from fa_gemma import build_gemma_node, stop_all

    with tempfile.TemporaryDirectory(prefix="agent-bench") as tmp:
        node = FakeNode(Path(tmp) / "root")
        servers = build_gemma_node(node)
        gpu_file = REPO / "tests" / "agent" / "fixtures" / "nvml_h100x2.json"
        try:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(node.root), str(gpu_file),
                 str(cycles)], capture_output=True, text=True, check=True, cwd=REPO)
        finally:
            stop_all(servers)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    _print(result)


def _print(r: dict) -> None:
    n = r["servers"]
    first, later = r["cpu_ms"][0], r["cpu_ms"][1:] or r["cpu_ms"]
    steady = statistics.median(later)
    rss_mb = r["rss_kb"] / 1024
    gz_kb = r["report_gz"] / 1024 / n
    rows = [
        ("servers found", f"{n}", ""),
        ("cycle CPU, first (lazy imports)", f"{first:.1f} ms",
         f"{first / TARGET_CPU_MS:.2f}x target"),
        ("cycle CPU, steady (median)", f"{steady:.1f} ms", f"{steady / TARGET_CPU_MS:.2f}x target"),
        ("baseline json.dumps+gzip", f"{r['baseline_ms']:.1f} ms",
         f"cycle = {steady / max(r['baseline_ms'], 1e-6):.1f}x baseline"),
        ("peak RSS", f"{rss_mb:.1f} MB", f"{rss_mb / TARGET_RSS_MB:.2f}x target"),
        ("report gz per server", f"{gz_kb:.1f} KB",
         f"{gz_kb / TARGET_GZ_PER_SERVER_KB:.2f}x target"),
        ("bare /metrics gz per server", f"{sum(r['metrics_gz']) / 1024 / n:.1f} KB",
         f"report = {r['report_gz'] / max(sum(r['metrics_gz']), 1):.2f}x bare metrics"),
        ("report raw JSON", f"{r['report_raw'] / 1024:.1f} KB", ""),
        ("baseline gz (json.dumps)", f"{r['baseline_gz'] / 1024:.1f} KB", ""),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, ratio in rows:
        print(f"{name:<{width}}  {value:>12}  {ratio}")
    if r["errors"]:
        print("server errors:", r["errors"])


def main() -> None:
    """CLI: ``--cycles N`` (default 10); ``--child`` is internal."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=10)
    parent(parser.parse_args().cycles)


if __name__ == "__main__":
    main()
