"""Benchmark: the full rules knowledge base on one server's context (target < 5 ms).

Run: ``.venv/bin/python bench/kb_eval.py [--repeat N]``. Builds one context from a
self-contained PUSH-recipe report (seed 000) whose /metrics text is real-sized (1,000+
lines, V1 names, spec-decode counters), then prints the median time of
``KnowledgeBase.evaluate(ctx)`` and, as a baseline measured in the same run, the median
time of one trivial CEL program (``true``) executed once per rule on a fresh activation.
The ratio says how much the rules cost beyond the CEL call overhead; no assertion is made
(speed targets are not tests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.kb.context import build_contexts  # noqa: E402
from audit.kb.engine import load_rules  # noqa: E402

TARGET_MS = 5.0  # full KB on one context under 5 ms median
HISTOGRAMS = {  # family -> bucket upper bounds (vllm-facts 1.2)
    "time_to_first_token_seconds": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                    0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
                                    160.0, 640.0, 2560.0],
    "inter_token_latency_seconds": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
    "request_time_per_output_token_seconds": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                              0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0],
    "e2e_request_latency_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                                    1920.0, 7680.0],
    "request_queue_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                   30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0],
    "request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                              20000, 50000, 100000, 200000],
    "request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
}


def metrics_text(engines: int = 8) -> str:
    """A V1 /metrics body with ``engines`` DP engine label sets (~130 lines each)."""
    lines = []
    for engine in range(engines):
        base = f'model_name="gemma-4-31b",engine="{engine}"'
        lines += [f"vllm:num_requests_running{{{base}}} 12",
                  f"vllm:num_requests_waiting{{{base}}} 0",
                  f"vllm:kv_cache_usage_perc{{{base}}} 0.41",
                  f"vllm:prompt_tokens_total{{{base}}} 9.1e+06",
                  f"vllm:generation_tokens_total{{{base}}} 1.2e+06",
                  f"vllm:num_preemptions_total{{{base}}} 0",
                  f"vllm:spec_decode_num_drafts_total{{{base}}} 300000",
                  f"vllm:spec_decode_num_draft_tokens_total{{{base}}} 900000",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{base}}} 480000"]
        for family, bounds in HISTOGRAMS.items():
            lines.append(f"# TYPE vllm:{family} histogram")
            for i, bound in enumerate(bounds):
                lines.append(f'vllm:{family}_bucket{{{base},le="{float(bound)}"}} '
                             f"{(i + 1) * 100}")
            lines.append(f'vllm:{family}_bucket{{{base},le="+Inf"}} {len(bounds) * 100}')
            lines += [f"vllm:{family}_sum{{{base}}} 12345.6",
                      f"vllm:{family}_count{{{base}}} {len(bounds) * 100}"]
    return "\n".join(lines) + "\n"


def push_report() -> dict:
    """A contract report of one 2x H100 host running seed 000's PUSH recipe on 0.25.1."""
    argv = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit", "--tensor-parallel-size", "2",
            "--max-model-len", "262144", "--gpu-memory-utilization", "0.94",
            "--max-num-seqs", "256", "--max-num-batched-tokens", "16384",
            "--kv-cache-dtype", "fp8", "--chat-template", "/t/gemma.jinja",
            "--enable-auto-tool-choice", "--reasoning-parser", "gemma4",
            "--tool-call-parser", "gemma4", "--speculative-config",
            '{"method":"eagle3","model":"RedHatAI/gemma-4-31B-it-speculator.eagle3",'
            '"num_speculative_tokens":3}',
            "--default-chat-template-kwargs", '{"enable_thinking": true}']
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3",
             "memory_total_bytes": 85520809984, "memory_used_bytes": None,
             "compute_capability": "9.0", "utilization_gpu_pct": None, "temperature_c": None,
             "power_draw_w": None, "power_limit_w": None} for i in range(2)]
    server = {"pid": 1, "started_at": "2026-09-30T10:00:00+00:00", "argv": argv, "env": {},
              "container_image": None, "base_url": "http://127.0.0.1:8000",
              "gpu_uuids": ["GPU-0", "GPU-1"], "vllm_version": "0.25.1",
              "installed_vllm_version": "0.25.1", "models": [],
              "chat_template": {"source": "/t/gemma.jinja", "size_bytes": 18683,
                                "sha256": "ae53464b" + "0" * 48 + "8de4c6d4"},
              "metrics": {"format": "prometheus-text", "scraped_at": "2026-09-30T12:00:00Z",
                          "text": metrics_text()}, "errors": []}
    return {"schema_version": 1, "report_id": "00000000-0000-4000-8000-000000000001",
            "collected_at": "2026-09-30T12:00:00+00:00",
            "agent": {"version": "bench", "interval_s": 30, "spool_dropped": 0},
            "host": {"hostname": "bench", "machine_id": "bench", "os": None, "kernel": None,
                     "nvidia_driver_version": None, "cuda_driver_version": None},
            "gpus": gpus, "gpu_error": None, "servers": [server]}


def median_ms(action: Callable[[], object], repeat: int) -> float:
    for _ in range(min(20, repeat)):
        action()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    kb = load_rules()
    report = push_report()
    ctx = build_contexts(report)[0]
    trivial = cel.compile("true")

    def baseline() -> None:
        activation = cel.Context()
        activation.update(ctx)
        for _ in kb.rules:
            trivial.execute(activation)

    lines = report["servers"][0]["metrics"]["text"].count("\n")
    full = median_ms(lambda: kb.evaluate(ctx), args.repeat)
    base = median_ms(baseline, args.repeat)
    print(f"rules: {len(kb.rules)}  /metrics lines: {lines}  repeat: {args.repeat}")
    print(f"full knowledge base on one context: median {full:.3f} ms "
          f"(target {TARGET_MS} ms: {'met' if full < TARGET_MS else 'MISSED'})")
    print(f"baseline, one trivial CEL program per rule: median {base:.3f} ms")
    print(f"ratio full / baseline: {full / base:.2f}x")


if __name__ == "__main__":
    main()
