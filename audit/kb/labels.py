"""Words for internal names: finding kinds, alert triggers and evidence keys.

One mapping for every page, email and Slack message, so a reader sees "Known issue",
"Risky upgrade" or "KV cache usage 88.0 %" instead of ``known_issue``, ``risky_upgrade`` or
``kv: 0.8804``. Pure Python, no Django (the engine formats rule messages with it too).

- :func:`label`: a kind or trigger (``known_issue`` -> "Known issue"); an unknown name reads
  as words (``restart_count`` -> "Restart count").
- :func:`evidence_label` / :func:`evidence_value`: one evidence entry as a label and a value
  in the unit of the field's meaning (seconds as ms/s, fractions as %, GiB, token counts with
  separators), never a dict/list repr; :func:`evidence_rows` does a whole evidence mapping.
- :func:`message_value`: a value inside a rule message (no unit added: the message carries
  its own), fractions as % and floats without exponent notation.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Finding kinds (``kind:`` of audit/rules/*.yaml, audit/kb/engine.py KINDS, and the
#: built-in ``crash_loop`` of audit/crashloop.py).
KIND_LABELS = {
    "known_issue": "Known issue",
    "ceiling": "Version ceiling",
    "pitfall": "Configuration pitfall",
    "template": "Chat template",
    "metric": "Live metric",
    "model": "Model",
    "crash_loop": "Crash loop",
}

#: Alert triggers (alerts.models.Trigger values).
TRIGGER_LABELS = {
    "risky_upgrade": "Risky upgrade",
    "new_finding": "New finding",
    "resolved": "Resolved",
    "host_silent": "Host stopped reporting",
    "metric_alarm": "Live-metric alarm",
    "knowledge_base": "Knowledge base",
    "test": "Test message",
}

# Units of evidence values: how a number is shown.
FRACTION = "fraction"  # 0-1 share -> "88.0 %"
SECONDS = "s"          # seconds -> "17.5 ms" / "2.47 s"
MS = "ms"              # milliseconds -> same as SECONDS
GIB = "GiB"
BYTES = "bytes"
TOKENS = "tokens"      # count of tokens, with separators
COUNT = "count"        # count, with separators
TPS = "tok/s"
FLAG = "flag"          # a vLLM flag's value: shown exactly as an operator types it
TEXT = "text"

#: Evidence key -> (label, unit). Keys are the ``evidence:`` names of audit/rules/*.yaml and
#: of the built-in findings (audit/crashloop.py, cannot-check gaps); a key that several rules
#: use with different meanings gets the unit of the numeric one (a text value stays text).
EVIDENCE = {
    "kv": ("KV cache usage", FRACTION),
    "kv_usage": ("KV cache usage", FRACTION),
    "hit_rate": ("Prefix cache hit rate", FRACTION),
    "fraction": ("Prompt tokens from the prefix cache", FRACTION),
    "rate": ("Draft acceptance rate", FRACTION),
    "acceptance_rate": ("Draft acceptance rate", FRACTION),
    "lifetime_rate": ("Draft acceptance rate, process lifetime", FRACTION),
    "baseline_rate": ("Draft acceptance rate, published baseline", FRACTION),
    "ttft_p50": ("TTFT median", SECONDS),
    "lifetime_ttft_p50": ("TTFT median, process lifetime", SECONDS),
    "tpot_p50": ("TPOT median", SECONDS),
    "lifetime_tpot_p50": ("TPOT median, process lifetime", SECONDS),
    "baseline_tpot": ("TPOT, published baseline", SECONDS),
    "e2e_p50": ("End-to-end latency median", SECONDS),
    "tpot_ms": ("TPOT median", MS),
    "baseline_ms": ("TPOT, published baseline", MS),
    "window_s": ("Metrics window", SECONDS),
    "window": ("Metrics window", TEXT),
    "span": ("Period", TEXT),
    "generation_tps": ("Generation throughput", TPS),
    "running": ("Requests running", COUNT),
    "waiting": ("Requests waiting", COUNT),
    "capacity": ("Requests waiting for capacity", COUNT),
    "deferred": ("Requests deferred for other reasons", COUNT),
    "rejected": ("Requests rejected at admission", COUNT),
    "by_reason": ("Rejections by reason", COUNT),
    "p99": ("Preemptions per request, p99", COUNT),
    "mean": ("Preemptions per request, mean", COUNT),
    "prompt": ("Prompt tokens", TOKENS),
    "cached": ("Prompt tokens from the prefix cache", TOKENS),
    "drafted": ("Draft tokens proposed", TOKENS),
    "draft_tokens": ("Draft tokens proposed", TOKENS),
    "accepted_tokens": ("Draft tokens accepted", TOKENS),
    "kv_tokens": ("KV cache capacity", TOKENS),
    "engine_kv_tokens": ("KV cache capacity reported by the engine", TOKENS),
    "fits_tokens": ("Longest request that fits", TOKENS),
    "longest_request": ("Longest request that fits", TOKENS),
    "estimate": ("Longest request that fits (estimate)", TOKENS),
    "suggested": ("Suggested --max-model-len", FLAG),
    "profile_tokens": ("Tokens of the memory-profiling run", TOKENS),
    "native_context": ("Model's native context", TOKENS),
    "concurrency": ("Full-length requests the KV cache holds", COUNT),
    "state_capacity_seqs": ("Sequences the state cache holds", COUNT),
    "invocations": ("Tool-parser invocations", COUNT),
    "mm_items": ("Multimodal items", COUNT),
    "restarts": ("Restarts", COUNT),
    "restart_count": ("Restarts in all", COUNT),
    "restarts_in_window": ("Restarts in the crash-loop window", COUNT),
    "window_minutes": ("Crash-loop window (minutes)", COUNT),
    "host_gpus": ("GPUs on the host", COUNT),
    "knee": ("Bandwidth knee (max_num_seqs)", COUNT),
    "gpu_memory_gib": ("GPU memory", GIB),
    "budget_gib": ("Memory budget per GPU", GIB),
    "kv_gib": ("KV cache pool per GPU", GIB),
    "kv_gib_one_request": ("KV cache of one full-length request", GIB),
    "request_gib": ("KV cache of one request per GPU", GIB),
    "weights_gib": ("Weights per GPU", GIB),
    "weight_gib": ("Weights per GPU", GIB),
    "activation_gib": ("Activations per GPU", GIB),
    "drafter_gib": ("Draft model per GPU", GIB),
    "size": ("Template size", BYTES),
    "gpu_memory_utilization": ("--gpu-memory-utilization", FLAG),
    "util": ("--gpu-memory-utilization", FLAG),
    "max_model_len": ("--max-model-len", FLAG),
    "max_num_seqs": ("--max-num-seqs", FLAG),
    "max_num_batched_tokens": ("--max-num-batched-tokens", FLAG),
    "tensor_parallel_size": ("--tensor-parallel-size", FLAG),
    "tp": ("Tensor parallel size (TP)", FLAG),
    "pipeline_parallel_size": ("--pipeline-parallel-size", FLAG),
    "pp": ("Pipeline parallel size (PP)", FLAG),
    "data_parallel_size": ("--data-parallel-size", FLAG),
    "dcp": ("--decode-context-parallel-size", FLAG),
    "kv_cache_dtype": ("--kv-cache-dtype", FLAG),
    "dtype": ("--dtype", FLAG),
    "quantization": ("Quantisation", FLAG),
    "k": ("Speculative tokens per step", FLAG),
    "rank": ("--max-lora-rank", FLAG),
    "offload": ("--cpu-offload-gb", FLAG),
    "version": ("vLLM version", TEXT),
    "installed": ("Installed vLLM", TEXT),
    "previous": ("Previous vLLM", TEXT),
    "release": ("vLLM release of the flag tables", TEXT),
    "installed_vllm_version": ("Installed vLLM", TEXT),
    "last_running_vllm_version": ("Last running vLLM", TEXT),
    "unverified_on": ("Not verified on vLLM", TEXT),
    "gpu": ("GPU", TEXT),
    "device": ("GPU", TEXT),
    "cc": ("Compute capability", TEXT),
    "compute_capability": ("Compute capability", TEXT),
    "driver": ("NVIDIA driver", TEXT),
    "model": ("Model", TEXT),
    "family": ("Model family", TEXT),
    "method": ("Speculative method", TEXT),
    "drafter": ("Draft model", TEXT),
    "sha256": ("Template SHA-256", TEXT),
    "argv": ("Command that failed", TEXT),
    "matched_line": ("Matched log line", TEXT),
    "last_error_line": ("Last error line", TEXT),
    "matched_rules": ("Rules that matched", TEXT),
    "signature_rule": ("Rule that matched", TEXT),
    "unit_or_container": ("Unit or container", TEXT),
    "exit_code": ("Exit code", TEXT),
    "last_exit_at": ("Last exit", TEXT),
    "first_failed_at": ("Failing since", TEXT),
    "failed_start": ("Failed start", TEXT),
    "cannot_check": ("Cannot check", TEXT),
    "metrics_available": ("Engine metrics collected", TEXT),
    "missing": ("Missing metrics", TEXT),
    "upgrade": ("After an upgrade", TEXT),
    "probe": ("Live probe", TEXT),
    "parser": ("Parser", TEXT),
    "kwargs": ("--default-chat-template-kwargs", FLAG),
    "server_side": ("Server-side setting", TEXT),
    "amplifier": ("What makes it worse", TEXT),
    "speculative": ("Speculative method", TEXT),
    "template": ("Chat template", TEXT),
    "vit": ("Vision encoder (ViT)", TEXT),
    "vit_cuda_graph": ("ViT CUDA graph", TEXT),
}

#: Name endings that give a unit to keys the table does not list (a new rule's evidence).
_SUFFIX_UNITS = (("_gib", GIB), ("_ms", MS), ("_s", SECONDS), ("_tokens", TOKENS),
                 ("_bytes", BYTES), ("_tps", TPS), ("_rate", FRACTION),
                 ("_fraction", FRACTION))
#: Words spelled in capitals when a name is turned into words.
_ACRONYMS = {"kv": "KV", "gpu": "GPU", "gpus": "GPUs", "tp": "TP", "pp": "PP", "dp": "DP",
             "ttft": "TTFT", "tpot": "TPOT", "vllm": "vLLM", "cuda": "CUDA", "mtp": "MTP",
             "lora": "LoRA", "vit": "ViT", "id": "id", "sha256": "SHA-256", "p50": "p50",
             "p99": "p99"}


def words(name: str) -> str:
    """``restart_count`` -> "Restart count", ``kv_cache_dtype`` -> "KV cache dtype"."""
    parts = [_ACRONYMS.get(p.lower(), p) for p in re.split(r"[_\s]+", str(name)) if p]
    if not parts:
        return ""
    first = parts[0]
    if first == first.lower():
        first = first[:1].upper() + first[1:]
    return " ".join([first, *parts[1:]])


def label(name: str) -> str:
    """A finding kind or alert trigger in words; any other name via :func:`words`."""
    key = str(name)
    return KIND_LABELS.get(key) or TRIGGER_LABELS.get(key) or words(key)


def _unit(key: str) -> str:
    if key in EVIDENCE:
        return EVIDENCE[key][1]
    return next((unit for suffix, unit in _SUFFIX_UNITS if key.endswith(suffix)), "")


def evidence_label(key: str) -> str:
    """The label of one evidence key ("KV cache usage"; unknown keys in words)."""
    if key in EVIDENCE:
        return EVIDENCE[key][0]
    bare = next((key[:-len(suffix)] for suffix, _ in _SUFFIX_UNITS
                 if key.endswith(suffix) and len(key) > len(suffix)), key)
    return words(bare)


def number(value: float, digits: int = 4) -> str:
    """A float with up to ``digits`` significant digits and never an exponent
    (``2.473e-06`` -> "0.000002473", ``1234.5678`` -> "1235", ``0.12345`` -> "0.1235")."""
    if value == 0 or not math.isfinite(value):
        return str(value if math.isfinite(value) else "n/a")
    places = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def duration(seconds: float) -> str:
    """Seconds as a person reads them: "850 µs", "17.5 ms", "2.47 s", "3 min 20 s"."""
    s = abs(seconds)
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{number(seconds * 1e6, 3)} µs"
    if s < 1:
        return f"{number(seconds * 1e3, 3)} ms"
    if s < 120:
        return f"{number(seconds, 3)} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numeric(value: float, unit: str, with_unit: bool) -> str:
    """A number in ``unit`` (see the module constants)."""
    if unit == FRACTION and -0.001 <= value <= 1.5:
        return f"{value * 100:.1f} %"
    if unit in (SECONDS, MS):
        seconds = value / 1000 if unit == MS else value
        return duration(seconds) if with_unit else number(value)
    if unit == FLAG:
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15 and unit in (
            TOKENS, COUNT, BYTES):
        value = int(value)
    if isinstance(value, int) and unit in (TOKENS, COUNT, BYTES):
        text = f"{value:,}"
    elif isinstance(value, int):
        text = str(value)
    elif unit == GIB:
        text = f"{value:.1f}" if abs(value) >= 1 else number(value, 2)
    elif abs(value) >= 10_000:
        text = f"{value:,.0f}"
    else:
        text = number(value)
    if with_unit and unit in (GIB, BYTES, TOKENS, TPS):
        return f"{text} {unit}"
    return text


def evidence_value(key: str, value: Any, *, with_unit: bool = True, _depth: int = 0) -> str:
    """One evidence value as text: None "n/a", booleans yes/no, numbers in the unit of
    ``key``'s meaning, lists joined with commas, mappings as "label: value; …" (never a
    Python or JSON repr)."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if _is_number(value):
        return _numeric(value, _unit(key), with_unit)
    if isinstance(value, list | tuple):
        if not value:
            return "none"
        return ", ".join(evidence_value(key, v, with_unit=with_unit, _depth=_depth + 1)
                         for v in value)
    if isinstance(value, dict):
        if not value:
            return "none"
        if _depth >= 3:
            return "…"
        return "; ".join(
            f"{evidence_label(str(k))}: "
            f"{evidence_value(str(k) if _unit(str(k)) else key, v, with_unit=with_unit, _depth=_depth + 1)}"  # noqa: E501
            for k, v in value.items())
    return str(value) if str(value).strip() else "none"


def evidence_rows(evidence: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """``[(key, label, value text)]`` of a finding's evidence, in its own order."""
    return [(str(k), evidence_label(str(k)), evidence_value(str(k), v))
            for k, v in (evidence or {}).items()]


def message_value(key: str, value: Any) -> str:
    """A placeholder's value inside a rule message: like :func:`evidence_value` without
    units (the message says them), except fractions, which read as percentages."""
    return evidence_value(key, value, with_unit=False)
