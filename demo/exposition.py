"""``/metrics`` text in the naming era of a vLLM version, built on a real capture.

The real captures in ``demo/data/cases/metrics`` (index: ``metrics/INDEX.md``) are the
templates: the era of a version picks one capture, whose families, label sets (with or
without ``engine``), HELP/TYPE lines, bucket layouts and ``cache_config_info`` labels are
kept. The families the simulator drives (token counters, request gauges, latency and
length histograms, speculative-decoding counters) are rendered from a
:class:`~demo.traffic.TrafficState` in that era's names; every other family is
copied from the capture with the model name substituted and ``_created`` samples set to
the process start time.

Era boundaries (INDEX.md "Metric-name changes observed across versions"):

* < 0.8: V0 (``gpu_cache_usage_perc``, ``time_per_output_token_seconds``, no ``engine``);
* 0.8.x - 0.9.x: early V1 (no ``engine`` label yet; spec-decode counters from ~0.9,
  PR #16665);
* 0.10.x: ``engine="0"``, ``kv_cache_usage_perc``;
* 0.11 - 0.19: the 0.11.x capture (``time_per_output_token_seconds`` next to
  ``inter_token_latency_seconds``);
* 0.20 - 0.28: the 0.25.1 capture (2026 families, five ``finished_reason`` values);
* >= 0.29 and unparsable tags (``latest``, ``nightly``): the 0.29.0 capture.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from demo.eras import Era
from demo.paths import metrics_dir

if TYPE_CHECKING:
    from demo.traffic import TrafficState

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_MODEL_LABEL = re.compile(r'model_name="[^"]*"')
_HIST_SUFFIXES = ("_bucket", "_sum", "_count")


#: Counters the simulator drives (base names; samples carry ``_total``).
DRIVEN_COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions",
                   "vllm:request_success", "vllm:prefix_cache_queries",
                   "vllm:prefix_cache_hits")
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens",
                 "vllm:spec_decode_num_accepted_tokens_per_pos")
DRIVEN_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:num_requests_waiting_by_reason", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc")
#: histogram name -> which traffic distribution feeds it
DRIVEN_HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:time_per_output_token_seconds": "itl",
    "vllm:request_time_per_output_token_seconds": "tpot",
    "vllm:e2e_request_latency_seconds": "e2e",
    "vllm:request_queue_time_seconds": "queue",
    "vllm:request_prompt_tokens": "prompt_len",
    "vllm:request_generation_tokens": "gen_len",
}
_DEFAULT_LAYOUT_CAPTURE = "vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3-specdecode.prom"
_HELP = {
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
}




@dataclass
class Block:
    """One family of a capture: its comment lines and sample lines, in order."""

    family: str
    comments: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)


def family_of(sample_name: str) -> str:
    """The family a sample belongs to (``_bucket``/``_sum``/``_count``/``_total`` dropped)."""
    for suffix in (*_HIST_SUFFIXES, "_total"):
        if sample_name.endswith(suffix) and sample_name not in ("vllm:iteration_tokens_total",):
            return sample_name[: -len(suffix)]
    return sample_name


def _comment_family(line: str) -> str:
    name = line.split()[2]
    return family_of(name) if not name.endswith("_created") else name


@lru_cache(maxsize=16)
def parse_capture(name: str) -> tuple[Block, ...]:
    """Split a capture (first ``# source:`` line dropped) into family blocks, in order."""
    lines = (metrics_dir() / name).read_text(encoding="utf-8").splitlines()[1:]
    blocks: list[Block] = []
    for line in lines:
        if not line.strip():
            continue
        if line.startswith("#"):
            fam = _comment_family(line) if line.startswith(("# HELP", "# TYPE")) else ""
            if not blocks or blocks[-1].family != fam or blocks[-1].samples:
                blocks.append(Block(fam))
            blocks[-1].comments.append(line)
            continue
        match = _SAMPLE.match(line)
        fam = family_of(match.group(1)) if match else ""
        if not blocks or (blocks[-1].family != fam and not (
                fam.startswith(blocks[-1].family) and blocks[-1].family.endswith("_created"))):
            blocks.append(Block(fam))
        blocks[-1].samples.append(line)
    return tuple(blocks)


@lru_cache(maxsize=32)
def bucket_layout(capture: str, family: str) -> tuple[float, ...] | None:
    """Finite ``le`` bounds of ``family`` in ``capture`` (first label set), or None."""
    bounds: list[float] = []
    for block in parse_capture(capture):
        if block.family != family:
            continue
        for line in block.samples:
            match = re.search(r'le="([^"]+)"', line)
            if match and match.group(1) != "+Inf":
                value = float(match.group(1))
                if bounds and value <= bounds[-1]:
                    return tuple(bounds)  # the next label set starts again
                bounds.append(value)
    return tuple(bounds) or None


def token_layout(max_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 token-count buckets up to ``max_len`` (INDEX.md "Bucket layouts")."""
    out: list[float] = []
    scale = 1
    while True:
        for step in (1, 2, 5):
            value = step * scale
            if value > max_len:
                return tuple(float(v) for v in out)
            out.append(value)
        scale *= 10


def layout_for(era: Era, family: str, max_len: int) -> tuple[float, ...]:
    """Bucket bounds for ``family``: the era's capture, else the 0.25.1 capture's layout."""
    if family in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens"):
        return token_layout(max_len)
    return bucket_layout(era.capture, family) \
        or bucket_layout(_DEFAULT_LAYOUT_CAPTURE, family) \
        or bucket_layout(_DEFAULT_LAYOUT_CAPTURE, "vllm:inter_token_latency_seconds") or (1.0,)


def fmt(value: float) -> str:
    """A sample value as prometheus_client writes it (``12.0``, ``1.7e+09``)."""
    if math.isinf(value):
        return "+Inf"
    return repr(float(value))


def labels(base: dict[str, str], **extra: str) -> str:
    """``{a="x",b="y"}`` with keys sorted, as prometheus_client renders them."""
    merged = {**base, **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(merged.items())) + "}"


def render(state: TrafficState) -> str:
    """The full ``/metrics`` body for one simulated server at its current state."""
    blocks = parse_capture(state.era.capture)
    driven = _driven_families(state, blocks)
    out: list[str] = []
    done: set[str] = set()
    for block in blocks:
        fam = block.family
        if fam in driven:
            if fam not in done:
                out += driven[fam](block.comments)
                done.add(fam)
            continue
        if _spec_family(fam) and not state.spec_k:
            continue  # a server without speculative decoding has no spec-decode families
        out += block.comments + [_keep(line, state) for line in block.samples]
    for fam, renderer in driven.items():
        if fam not in done:
            out += renderer([])
    return "\n".join(out) + "\n"


def _spec_family(fam: str) -> bool:
    return fam.startswith("vllm:spec_decode_")


def _keep(line: str, state: TrafficState) -> str:
    """A copied sample: model name substituted, ``_created`` set to the process start."""
    line = _MODEL_LABEL.sub(f'model_name="{state.model_name}"', line)
    match = _SAMPLE.match(line)
    if match and match.group(1).endswith("_created"):
        return f"{match.group(1)}{match.group(2) or ''} {fmt(state.started_at)}"
    if match and match.group(1) == "vllm:cache_config_info":
        return state.cache_config_line(line)
    return line


def _driven_families(state: TrafficState, blocks: tuple[Block, ...]) -> dict:
    """family -> function(comments) -> lines, for every family this server drives."""
    present = {b.family for b in blocks}
    era = state.era
    base = {"model_name": state.model_name}
    if any('engine="' in s for b in blocks for s in b.samples if s.startswith("vllm:")):
        base["engine"] = "0"
    out: dict = {}
    for name in DRIVEN_COUNTERS:
        if name in present or name in ("vllm:prompt_tokens", "vllm:generation_tokens",
                                        "vllm:request_success", "vllm:num_preemptions"):
            out[name] = _counter_renderer(state, name, base)
    if state.spec_k and era.spec:
        for name in SPEC_COUNTERS:
            out[name] = _counter_renderer(state, name, base)
    for name in DRIVEN_GAUGES:
        if name in present or name in ("vllm:num_requests_running",
                                       "vllm:num_requests_waiting", era.kv_gauge):
            out[name] = _gauge_renderer(state, name, base)
    wanted = [h for h in DRIVEN_HISTOGRAMS if h in present] + list(era.extra_histograms)
    for name in dict.fromkeys(wanted):
        out[name] = _histogram_renderer(state, name, base)
    return out


def _head(name: str, kind: str, comments: list[str], suffix: str = "") -> list[str]:
    if comments:
        return list(comments)  # never append to the cached capture's lists
    sample = name + suffix
    return [f"# HELP {sample} {_HELP.get(name, name.split(':', 1)[-1].replace('_', ' '))}",
            f"# TYPE {sample} {kind}"]


def _counter_renderer(state: TrafficState, name: str, base: dict[str, str]):
    def render_counter(comments: list[str]) -> list[str]:
        lines = _head(name, "counter", comments, "_total")
        for extra, value in state.counter_samples(name):
            lines.append(f"{name}_total{labels(base, **extra)} {fmt(math.floor(value))}")
        return lines
    return render_counter


def _gauge_renderer(state: TrafficState, name: str, base: dict[str, str]):
    def render_gauge(comments: list[str]) -> list[str]:
        lines = _head(name, "gauge", comments)
        for extra, value in state.gauge_samples(name):
            lines.append(f"{name}{labels(base, **extra)} {fmt(value)}")
        return lines
    return render_gauge


def _histogram_renderer(state: TrafficState, name: str, base: dict[str, str]):
    def render_histogram(comments: list[str]) -> list[str]:
        lines = _head(name, "histogram", comments)
        bounds = layout_for(state.era, name, state.max_model_len)
        cumulative, total, total_sum = state.histogram(DRIVEN_HISTOGRAMS[name], name, bounds)
        for le, count in zip(bounds, cumulative, strict=True):
            lines.append(f"{name}_bucket{labels(base, le=fmt(le))} {fmt(count)}")
        lines.append(f"{name}_bucket{labels(base, le='+Inf')} {fmt(total)}")
        lines.append(f"{name}_count{labels(base)} {fmt(total)}")
        lines.append(f"{name}_sum{labels(base)} {fmt(total_sum)}")
        return lines
    return render_histogram
