"""Workload profile of one server: given by the operator, else inferred from live metrics.

Profiles (seed 000 "Decision guide"): ``chat`` (short prompts <= 4K, many users),
``long-context`` (>= 16K prompts: RAG, summarisation), ``mixed`` (chat plus occasional long
documents), ``latency`` (a latency-sensitive single user). Inference reads the prompt-length
histogram percentiles and the running-requests gauge of the context's metrics window
(falling back to the lifetime window), so the answer always says which it used.
"""

from __future__ import annotations

from typing import Any

from advice.recommend import data

PROFILES = ("chat", "long-context", "mixed", "latency")
_GUIDE = "seed:000_ffb301503ad246f2.txt#Decision guide — which TP for which workload"


def _pick(metrics: dict[str, Any], key: str) -> Any:
    value = metrics.get(key)
    if value is None:
        value = (metrics.get("lifetime") or {}).get(key)
    return value


def _from_metrics(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Profile from prompt_len p50/p99 and requests_running, or None without a histogram."""
    p50, p99 = _pick(metrics, "prompt_len_p50"), _pick(metrics, "prompt_len_p99")
    if p50 is None:
        return None
    p90 = _pick(metrics, "prompt_len_p90")
    running = _pick(metrics, "requests_running")
    short, long = data.workload_value("short_prompt_tokens"), data.workload_value(
        "long_prompt_tokens")
    tail = p99 if p99 is not None else (p90 if p90 is not None else p50)
    if p50 >= long:
        profile = "long-context"
    elif tail >= long or p50 > short:
        profile = "mixed"
    elif running is not None and running <= data.workload_value("single_user_running"):
        profile = "latency"
    else:
        profile = "chat"
    evidence = {"prompt_len_p50": p50, "prompt_len_p90": p90, "prompt_len_p99": p99,
                "requests_running": running}
    return {"profile": profile, "evidence": evidence,
            "source": f"inferred from live metrics (prompt length p50 {p50:.0f}, "
                      f"p99 {tail:.0f} tokens; {running} running; short <= {short}, "
                      f"long >= {long})"}


def infer_workload(ctx: dict[str, Any], requested: str | None = None) -> dict[str, Any]:
    """Workload profile for one context.

    Returns ``{"profile": one of PROFILES, "source": text saying how it was chosen,
    "evidence": dict, "references": [seed refs]}``. Raises ``ValueError`` for an unknown
    ``requested`` profile.
    """
    if requested is not None:
        if requested not in PROFILES:
            raise ValueError(f"unknown workload {requested!r}; choose one of {PROFILES}")
        return {"profile": requested, "source": "set by the operator", "evidence": {},
                "references": [_GUIDE]}
    found = _from_metrics(ctx.get("metrics") or {})
    if found is not None:
        return {**found, "references": [_GUIDE]}
    flags = ctx.get("flags") or {}
    set_len = flags.get("max_model_len") if "max_model_len" in (
        (ctx.get("flags_meta") or {}).get("set") or []) else None
    if isinstance(set_len, int) and set_len > data.recipe("LIGHT")["max_model_len"]:
        return {"profile": "mixed", "evidence": {"max_model_len": set_len},
                "references": [_GUIDE],
                "source": f"no prompt-length histogram; the current --max-model-len {set_len} "
                          "asks for long documents, so the mixed profile is assumed"}
    return {"profile": "chat", "evidence": {}, "references": [_GUIDE],
            "source": "no prompt-length histogram; short chat assumed (the default)"}
