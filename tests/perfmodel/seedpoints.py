"""The measured operating points of the seed benchmark cards, as reports the recommender reads.

Every point names its seed (copies in demo/data/seeds/) and section; ``assumed`` lists what
the card does not state and the point fills in. ``report(point)`` builds a contract report
of a server running that command with the /metrics a V1 server would serve at that load
(prompt and TPOT/TTFT medians, generated tokens per finished request, running requests).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import AWQ_31B, EAGLE3, host_report, serve  # noqa: E402

__all__ = ["POINTS", "host_report", "load_metrics", "report", "report_pair", "serve"]

H100 = "NVIDIA H100 80GB HBM3"
GB10 = "NVIDIA GB10"
NVFP4_31B = "nvidia/Gemma-4-31B-IT-NVFP4"
NVFP4_26B = "nvidia/Gemma-4-26B-A4B-NVFP4"
MTP = ('{"method":"mtp","model":"google/gemma-4-26B-A4B-it-assistant",'
       '"num_speculative_tokens":3}')

LIGHT_FLAGS = ("--tensor-parallel-size", "1", "--max-model-len", "32768",
               "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64",
               "--max-num-batched-tokens", "8192", "--kv-cache-dtype", "fp8",
               "--speculative-config", EAGLE3)
PUSH_FLAGS = ("--tensor-parallel-size", "2", "--max-model-len", "262144",
              "--gpu-memory-utilization", "0.94", "--max-num-seqs", "256",
              "--max-num-batched-tokens", "16384", "--kv-cache-dtype", "fp8",
              "--speculative-config", EAGLE3)
GB10_26B_FLAGS = ("--max-model-len", "65536", "--gpu-memory-utilization", "0.85",
                  "--speculative-config", MTP)

POINTS: dict[str, dict[str, Any]] = {
    "LIGHT 4K/512 c64": {
        "gpu": H100, "gpus": 1, "model": AWQ_31B, "flags": LIGHT_FLAGS,
        "concurrency": 64, "prompt": 4096, "output": 512,
        "tpot_s": 0.141, "ttft_s": None, "output_tps": 408,
        "source": "seed:000_ffb301503ad246f2.txt#LIGHT (408 tok/s, TPOT mean 141 ms at "
                  "concurrency 64-80)", "assumed": "concurrency 64 (the card: 64-80)"},
    "PUSH 4K/512": {
        "gpu": H100, "gpus": 2, "model": AWQ_31B, "flags": PUSH_FLAGS,
        "concurrency": 64, "prompt": 4096, "output": 512,
        "tpot_s": 0.078, "ttft_s": None, "output_tps": 745,
        "source": "seed:000_ffb301503ad246f2.txt#PUSH headline numbers (745 tok/s, ~78 ms)",
        "assumed": "concurrency 64 (not stated; LIGHT's sweep point)"},
    "PUSH 16K/1K c128": {
        "gpu": H100, "gpus": 2, "model": AWQ_31B, "flags": PUSH_FLAGS,
        "concurrency": 128, "prompt": 16384, "output": 1024,
        "tpot_s": 0.193, "ttft_s": 137.0, "output_tps": 284,
        "source": "seed:000_ffb301503ad246f2.txt#PUSH headline numbers (284 tok/s @ c=128, "
                  "~193 ms TPOT, ~137 s TTFT)", "assumed": ""},
    "GB10 31B NVFP4 EAGLE3 c1": {
        "gpu": GB10, "gpus": 1, "model": NVFP4_31B,
        "flags": ("--max-model-len", "65536", "--gpu-memory-utilization", "0.85",
                  "--max-num-seqs", "1", "--speculative-config", EAGLE3),
        "concurrency": 1, "prompt": 256, "output": 256,
        "tpot_s": 0.0681, "ttft_s": None, "output_tps": 14.78,
        "source": "seed:001_97558c7218f56b5c.txt#Notes (decode 14.78 tok/s, TPOT median "
                  "68.1 ms)", "assumed": "ShareGPT prompt ~256 tokens; output = max-tokens 256"},
    "GB10 26B-A4B NVFP4 MTP c128": {
        "gpu": GB10, "gpus": 1, "model": NVFP4_26B,
        "flags": GB10_26B_FLAGS + ("--max-num-seqs", "128"),
        "concurrency": 128, "prompt": 256, "output": 256,
        "tpot_s": None, "ttft_s": None, "output_tps": 1380,
        "source": "seed:003_680bab14e519c987.txt#Notes (c128, 1380 tok/s, last healthy "
                  "point)", "assumed": "ShareGPT prompt ~256 tokens; output = max-tokens 256"},
    "GB10 26B-A4B NVFP4 MTP c256 (collapse)": {
        "gpu": GB10, "gpus": 1, "model": NVFP4_26B,
        "flags": GB10_26B_FLAGS + ("--max-num-seqs", "256"),
        "concurrency": 256, "prompt": 256, "output": 256,
        "tpot_s": 0.2521, "ttft_s": 13.3497, "output_tps": 0.15,
        "source": "seed:003_680bab14e519c987.txt#Full run command (TTFT median 13349.7 ms, "
                  "TPOT median 252.1 ms; 0.15 tok/s aggregate)",
        "assumed": "ShareGPT prompt ~256 tokens; max-num-seqs 256 (the run's concurrency)"},
}


def _around(name: str, value: float, count: int, base: str) -> list[str]:
    """Histogram lines whose median is ``value`` (one bucket from 0.95 to 1.05 x value)."""
    low, high = value * 0.95, value * 1.05
    return [f'{name}_bucket{{{base},le="{low}"}} 0', f'{name}_bucket{{{base},le="{high}"}} {count}',
            f'{name}_bucket{{{base},le="+Inf"}} {count}', f"{name}_count{{{base}}} {count}",
            f"{name}_sum{{{base}}} {value * count}"]


def load_metrics(concurrency: int, prompt: float, output: float, tpot_s: float | None,
                 ttft_s: float | None, finished: int = 200) -> str:
    """V1 /metrics text of a server at this load (medians as given)."""
    base = 'model_name="m",engine="0"'
    lines = _around("vllm:request_prompt_tokens", prompt, finished, base)
    if tpot_s:
        lines += _around("vllm:request_time_per_output_token_seconds", tpot_s, finished, base)
    if ttft_s:
        lines += _around("vllm:time_to_first_token_seconds", ttft_s, finished, base)
    lines += [f'vllm:request_success_total{{{base},finished_reason="length"}} {finished}',
              f"vllm:generation_tokens_total{{{base}}} {finished * output}",
              f"vllm:prompt_tokens_total{{{base}}} {finished * prompt}",
              f"vllm:num_requests_running{{{base}}} {concurrency}",
              f"vllm:num_requests_waiting{{{base}}} 0",
              f"vllm:kv_cache_usage_perc{{{base}}} 0.5"]
    return "\n".join(lines) + "\n"


def report(point: dict[str, Any], version: str = "0.25.1",
           measured: bool = True) -> dict[str, Any]:
    """A contract report of a server running ``point``'s command at its load."""
    metrics = load_metrics(point["concurrency"], point["prompt"], point["output"],
                           point["tpot_s"] if measured else None,
                           point["ttft_s"] if measured else None)
    return host_report(point["gpu"], point["gpus"], serve(point["model"], *point["flags"]),
                       version, metrics=metrics)


def report_pair(point: dict[str, Any], seconds: float = 60.0) -> tuple[dict, dict]:
    """(earlier, later) reports of the same server ``seconds`` apart whose counters advance
    at the point's measured output tokens/s (the rate a single scrape cannot give)."""
    from datetime import datetime, timedelta

    earlier = report(point)
    finished = round(point["output_tps"] * seconds / point["output"])
    later = report(point)
    later["servers"][0]["metrics"]["text"] = load_metrics(
        point["concurrency"], point["prompt"], point["output"], point["tpot_s"],
        point["ttft_s"], finished=200 + finished)
    stamp = datetime.fromisoformat(earlier["servers"][0]["metrics"]["scraped_at"])
    later["servers"][0]["metrics"]["scraped_at"] = \
        (stamp + timedelta(seconds=seconds)).isoformat()
    return earlier, later
