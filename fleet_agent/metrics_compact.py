"""The compact form of a ``/metrics`` scrape: the families the dashboard reads, as numbers.

A vLLM ``/metrics`` body is 50-300 KB of text, most of it ``python_*``/``process_*``/``http_*``
families and histograms no rule reads; parsing it was most of the dashboard's per-report
cost. The agent reads the body anyway, so it sends the families of :data:`FAMILIES` as numbers
(wire contract, ``servers[].metrics.compact``) and the raw text only when the set of metric
names changes, every ``metrics_text_every`` cycles, or when the dashboard asks
(:class:`TextPolicy`).

Shape (``docs/wire-contract.md``): ``samples``: sample name -> ``[[labels, value], ...]``
(counters, gauges, info series; names as exposed, e.g. ``vllm:prompt_tokens_total``);
``histograms``: family name -> ``[{"labels", "le", "counts", "sum", "count"}, ...]`` with
``le`` the bucket bounds as exposed (strings, ``"+Inf"`` last) and ``counts`` the cumulative
bucket counts in the same order; ``names_sha256``: sha256 of the sorted, newline-joined
names of every sample in the body (every family, not only these); ``vllm_names``: how many
distinct ``vllm:`` sample names the body had; ``vllm_engine_label``: whether any ``vllm:``
sample carried an ``engine`` label (the dashboard tells the engine era by both). Non-finite
values (NaN, Inf) are dropped: JSON cannot carry them and the dashboard ignores them in text.

No ``prometheus_client`` (the agent installs without it): sample lines are read with the
exposition format's grammar (https://prometheus.io/docs/instrumenting/exposition_formats/).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

#: Metric families the dashboard reads (its name tables, ``audit/kb/metrics_names.py``, which
#: map every naming era of vLLM's per-release metric tables onto canonical values, plus the
#: V0/V1-only names it tells the engine era by). Family names: counters without ``_total``,
#: histograms without ``_bucket``/``_sum``/``_count``. ``tests/audit/test_metrics_compact.py``
#: fails when this list and the dashboard's tables disagree.
FAMILIES: frozenset[str] = frozenset({
    "vllm:admission_rejections", "vllm:avg_generation_throughput_toks_per_s",
    "vllm:avg_prompt_throughput_toks_per_s", "vllm:cache_config", "vllm:cache_config_info",
    "vllm:cpu_cache_usage_perc", "vllm:cpu_prefix_cache_hit_rate",
    "vllm:e2e_request_latency_seconds", "vllm:generation_tokens", "vllm:gpu_cache_usage_perc",
    "vllm:gpu_prefix_cache_hit_rate", "vllm:gpu_prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries", "vllm:inter_token_latency_seconds",
    "vllm:kv_cache_usage_perc", "vllm:mm_cache_hits", "vllm:mm_cache_queries",
    "vllm:model_execute_time_milliseconds", "vllm:model_forward_time_milliseconds",
    "vllm:num_preemptions", "vllm:num_requests_running", "vllm:num_requests_swapped",
    "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
    "vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:prompt_tokens",
    "vllm:prompt_tokens_cached", "vllm:request_generation_tokens",
    "vllm:request_num_preemptions", "vllm:request_prompt_tokens",
    "vllm:request_queue_time_seconds", "vllm:request_success",
    "vllm:request_time_per_output_token_seconds", "vllm:spec_decode_draft_acceptance_rate",
    "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
    "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_drafts",
    "vllm:time_in_queue_requests", "vllm:time_per_output_token_seconds",
    "vllm:time_to_first_token_seconds", "vllm:tool_call_parser_invocations",
})

#: Bounds of the compact form (the contract's, ``fleet_agent/schema.py``): series per family
#: and buckets per histogram. vLLM exposes one series per engine and model (DP=8: 8 series)
#: and at most a few dozen buckets; what is past the bounds is not sent.
MAX_SERIES = 512
MAX_BUCKETS = 256
#: Cycles between two raw texts when nothing else asks for one (30 s cycles: hourly).
DEFAULT_TEXT_EVERY = 120

_HIST_SUFFIXES = ("_bucket", "_sum", "_count")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,?)')
_UNESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_line(line: str) -> tuple[str, dict[str, str], float] | None:
    """``(name, labels, value)`` of one sample line, or None for a line that is not one
    (comment, blank, malformed). A trailing timestamp is ignored."""
    match = _NAME.match(line)
    if match is None:
        return None
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            label = _LABEL.match(line, pos)
            if label is None:
                break
            labels[label.group(1)] = _unescape(label.group(2))
            pos = label.end()
            if not label.group(3):
                break
        rest = line[pos:].lstrip()
        if not rest.startswith("}"):
            return None
        rest = rest[1:]
    else:
        rest = line[pos:]
    words = rest.split()
    if not words:
        return None
    try:
        return name, labels, float(words[0])
    except ValueError:
        return None


def _family(name: str) -> tuple[str, str] | None:
    """``(family, role)`` for a sample name this module sends: role ``""`` for a plain
    sample, ``bucket``/``sum``/``count`` for a histogram part. Scrapers that rewrite the colon
    (``vllm_num_requests_running``) are matched too."""
    canon = "vllm:" + name[5:] if name.startswith("vllm_") else name
    if canon in FAMILIES or (canon.endswith("_total") and canon[:-6] in FAMILIES):
        return canon, ""
    for suffix in _HIST_SUFFIXES:
        if canon.endswith(suffix) and canon[:-len(suffix)] in FAMILIES:
            return canon[:-len(suffix)], suffix[1:]
    return None


def compact(text: str) -> dict[str, Any]:
    """The compact form of one ``/metrics`` body (shape in the module docstring)."""
    names: set[str] = set()
    samples: dict[str, list[list[Any]]] = {}
    hists: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
    per_family: dict[str, int] = {}
    engine_label = False
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        match = _NAME.match(line)
        if match is None:
            continue
        names.add(match.group())
        if not line.startswith("vllm"):
            continue
        engine_label = engine_label or 'engine="' in line
        found = _family(match.group())
        if found is None:
            continue
        parsed = parse_line(line)
        if parsed is None or not math.isfinite(parsed[2]):
            continue
        name, labels, value = parsed
        family, role = found
        if not role:
            series = samples.setdefault(name, [])
            if len(series) < MAX_SERIES:
                series.append([labels, value])
            continue
        le = labels.pop("le", None) if role == "bucket" else None
        key = (name[:-len(role) - 1], tuple(sorted(labels.items())))
        hist = hists.get(key)
        if hist is None:
            if per_family.get(key[0], 0) >= MAX_SERIES:
                continue
            per_family[key[0]] = per_family.get(key[0], 0) + 1
            hist = hists[key] = {"labels": labels, "le": [], "counts": [],
                                 "sum": None, "count": None}
        if role == "bucket":
            if le is not None and len(hist["le"]) < MAX_BUCKETS:
                hist["le"].append(le)
                hist["counts"].append(value)
        else:
            hist[role] = value
    histograms: dict[str, list[dict[str, Any]]] = {}
    for (family, _labels), hist in hists.items():
        histograms.setdefault(family, []).append(hist)
    return {"samples": samples, "histograms": histograms,
            "names_sha256": names_digest(names),
            "vllm_names": sum(1 for n in names if n.startswith(("vllm:", "vllm_"))),
            "vllm_engine_label": engine_label}


def names_digest(names: set[str]) -> str:
    """sha256 (hex) of the sorted, newline-joined metric names: changes when a family
    appears or goes (an upgrade, a flag that adds metrics), not when values move."""
    return hashlib.sha256("\n".join(sorted(names)).encode("utf-8")).hexdigest()


@dataclass
class TextPolicy:
    """When the raw text goes with the compact form, per server identity (kept across cycles).

    Until the dashboard has said it derives from the compact form (``metrics_compact`` in a
    202 answer; an older dashboard reads the text alone), the text goes every cycle. Then it
    is sent on a server's first cycle, when its set of metric names changed, every ``every``
    cycles (0: only on a change or a request), and on the cycle after the dashboard asked
    for it in a report answer (``metrics_text`` in the 202, :meth:`request`).
    """

    every: int = DEFAULT_TEXT_EVERY
    #: identity -> (names digest of the last text sent, cycles since)
    seen: dict[str, tuple[str, int]] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    dashboard_reads_compact: bool = False

    def request(self, identities: list[str]) -> None:
        """The dashboard asked for these servers' text (next cycle); ``*``: every server
        seen so far."""
        for identity in identities:
            self.requested.update(self.seen if identity == "*" else (identity,))

    def send_text(self, identity: str, digest: str) -> bool:
        """Whether this cycle's report carries the text for ``identity``; records the cycle."""
        last = self.seen.get(identity)
        due = (not self.dashboard_reads_compact or last is None or last[0] != digest
               or identity in self.requested
               or (self.every > 0 and last[1] + 1 >= self.every))
        self.requested.discard(identity)
        self.seen[identity] = (digest, 0) if due else (digest, last[1] + 1)
        return due
