"""One model of a running vLLM server's capacity: the engine's own numbers first.

The rules (context key ``server_model``), the recommender (advice.recommend), the planner and
the pages read the same figures from here instead of re-deriving them, so a finding, the
recommended command and the host page never disagree on what the pool holds.

:func:`server_model` returns a dict (every key always present, None when unknown)::

    max_model_len           tokens; the engine's own value (GET /v1/models) first, then argv /
                            the release's derivation (``flags.max_model_len``)
    max_model_len_source    where it came from
    native_context          tokens; the model's native context (rope scaling applied where
                            vLLM applies it), else max_position_embeddings
    block_size              tokens per KV block; the engine's (cache_config_info), else argv
    kv_pool_tokens          tokens; the engine's pool (cache_config_info
                            ``kv_cache_size_tokens``, else ``num_gpu_blocks`` x
                            ``block_size``), else the estimate
    kv_pool_source          "engine" | "estimate" | None
    max_concurrency         count of ``max_model_len`` requests the pool holds (the engine's
                            "Maximum concurrency for N tokens per request"), else estimated
    max_concurrency_source  "engine" | "engine pool with the model's request arithmetic" |
                            "estimate" | None
    longest_request_tokens  tokens one request may use before the pool is full
    longest_request_source  how that was obtained (sentence)
    request_fits            one ``max_model_len`` request fits the pool (None: cannot say)
    hybrid                  sliding-window or linear-attention/Mamba layers: a request's KV
                            need is not ``max_model_len`` tokens of full attention
    estimate                {kv_pool_tokens, longest_request_tokens, max_concurrency, source}
    arithmetic_text         the figures in one sentence, for messages and pages

Hybrid arithmetic (the same everywhere): a sliding layer holds at most window + one chunk of
tokens per request (audit.kb.geometry.request_bytes), a linear/Mamba layer one state; so the
longest request is the pool minus those fixed parts over the full-attention bytes per token.
The estimate (audit.kb.memory for any config.json geometry, else audit.kb.geometry for the
table rows) computes it; the engine's figure rescales it: with the engine's concurrency
``c`` and the estimate's ``c_est`` for the same ``max_model_len``, the longest request is
``longest_est x c / c_est`` (for a full-attention model this is ``max_model_len x c``,
vLLM's own definition); with the engine's pool ``P`` alone it is ``longest_est x P / P_est``.
Source of the engine's definitions: vllm/v1/core/kv_cache_utils.py
(``get_max_concurrency_for_kv_cache_config``, ``_report_kv_cache_config``), and the seed's
PUSH recipe (seed:000_ffb301503ad246f2.txt, "Maximum concurrency for 262,144 tokens per
request: 6.11x" against a 244K-token pool).
"""

from __future__ import annotations

from typing import Any

from audit.kb.geometry import longest_request, request_bytes

ENGINE = "engine"
ESTIMATE = "estimate"
KEYS = ("max_model_len", "max_model_len_source", "native_context", "block_size",
        "kv_pool_tokens", "kv_pool_source", "max_concurrency", "max_concurrency_source",
        "longest_request_tokens", "longest_request_source", "request_fits", "hybrid",
        "estimate", "arithmetic_text")
#: Above this, "the longest request" is unbounded by KV (a pure sliding-window model).
UNBOUNDED = 10**9


def _num(value: Any) -> float | None:
    """A positive finite number from a label or value ("None", "", junk -> None)."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 and out != float("inf") else None


def _estimate(memory: dict[str, Any], geometry: dict[str, Any]) -> dict[str, Any]:
    """The estimate of record: the config-based memory budget when it is complete, else the
    geometry table's estimate; ``source`` names which."""
    if memory.get("known") and memory.get("kv_capacity_tokens") is not None:
        return {"kv_pool_tokens": memory.get("kv_capacity_tokens"),
                "longest_request_tokens": memory.get("single_request_max_tokens"),
                "max_concurrency": memory.get("max_concurrency"),
                "source": "memory budget of the model's config (audit.kb.memory)"}
    if geometry.get("kv_capacity_tokens_estimate") is not None:
        return {"kv_pool_tokens": geometry.get("kv_capacity_tokens_estimate"),
                "longest_request_tokens": geometry.get("single_request_max_tokens_estimate"),
                "max_concurrency": geometry.get("max_concurrency_estimate"),
                "source": "geometry table estimate (audit.kb.geometry)"}
    return {"kv_pool_tokens": None, "longest_request_tokens": None, "max_concurrency": None,
            "source": None}


def _is_hybrid(model: dict[str, Any], geometry: dict[str, Any], memory: dict[str, Any]) -> bool:
    arch = model.get("arch") or {}
    by_kind = memory.get("kv_bytes_by_kind") or {}
    return bool(arch.get("is_hybrid") or arch.get("sliding_window")
                or geometry.get("kv_bytes_per_token_sliding") or by_kind.get("sliding")
                or memory.get("state_bytes_per_seq"))


def _engine_pool(metrics: dict[str, Any], cache: dict[str, Any]) -> int | None:
    pool = _num(metrics.get("kv_capacity_tokens"))
    if pool is None:
        blocks, size = _num(cache.get("num_gpu_blocks")), _num(cache.get("block_size"))
        pool = blocks * size if blocks and size else None
    return int(pool) if pool else None


def _served_len(cards: list[Any]) -> int | None:
    return next((c["max_model_len"] for c in cards or [] if isinstance(c, dict)
                 and isinstance(c.get("max_model_len"), int) and c["max_model_len"] > 0), None)


def server_model(*, flags: dict[str, Any], sources: dict[str, Any], model: dict[str, Any],
                 geometry: dict[str, Any], memory: dict[str, Any], metrics: dict[str, Any],
                 cache: dict[str, Any], cards: list[Any] | None) -> dict[str, Any]:
    """The capacity model of one server (see the module docstring for the keys).

    ``metrics``: the context's ``metrics`` block (``kv_capacity_tokens``,
    ``kv_max_concurrency`` from ``cache_config_info``); ``cache``: the raw
    ``cache_config_info`` labels; ``cards``: the server's ``/v1/models`` entries. Never
    raises on malformed input (labels are strings, possibly "None")."""
    out: dict[str, Any] = dict.fromkeys(KEYS)
    served = _served_len(cards or [])
    argv_len = flags.get("max_model_len") if isinstance(flags.get("max_model_len"), int) \
        and not isinstance(flags.get("max_model_len"), bool) else None
    length = served or argv_len
    out["max_model_len"] = length
    out["max_model_len_source"] = "GET /v1/models (the engine's value)" if served \
        else sources.get("max_model_len") if length else None
    arch = model.get("arch") or {}
    out["native_context"] = arch.get("derived_max_model_len") \
        or geometry.get("max_position_embeddings") or arch.get("max_position_embeddings")
    block = _num(cache.get("block_size")) or _num(flags.get("block_size"))
    out["block_size"] = int(block) if block else None
    out["hybrid"] = _is_hybrid(model, geometry, memory)
    est = _estimate(memory, geometry)
    out["estimate"] = est
    _capacity(out, est, _shape(memory, geometry, model, flags), length,
              _engine_pool(metrics, cache), _num(metrics.get("kv_max_concurrency")))
    out["arithmetic_text"] = _sentence(out)
    return out


def _shape(memory: dict[str, Any], geometry: dict[str, Any], model: dict[str, Any],
           flags: dict[str, Any]) -> dict[str, Any] | None:
    """Per-token bytes by kind, window, chunk and state of one request (per GPU), from the
    config-based budget, else the geometry table; None when neither knows the layers."""
    by_kind = memory.get("kv_bytes_by_kind") or {}
    chunk = flags.get("max_num_batched_tokens")
    chunk = chunk if isinstance(chunk, int) and not isinstance(chunk, bool) else 2048
    if memory.get("kv_bytes_per_token"):
        window = (model.get("arch") or {}).get("sliding_window") or geometry.get("sliding_window")
        return {"full": (by_kind.get("full") or 0.0) + (by_kind.get("mla") or 0.0),
                "sliding": by_kind.get("sliding") or 0.0, "window": window,
                "chunk": memory.get("profile_tokens") or chunk,
                "state": memory.get("state_bytes_per_seq") or 0.0}
    if geometry.get("kv_bytes_per_token_global") is not None:
        return {"full": geometry.get("kv_bytes_per_token_global") or 0.0,
                "sliding": geometry.get("kv_bytes_per_token_sliding") or 0.0,
                "window": geometry.get("sliding_window"), "chunk": chunk, "state": 0.0}
    return None


def _need(shape: dict[str, Any], tokens: int, block: int) -> float:
    window = shape["window"] if shape["sliding"] else None
    return request_bytes(tokens, shape["full"], shape["sliding"], window, shape["chunk"],
                         block) + shape["state"]


def _longest(shape: dict[str, Any], pool_bytes: float, block: int) -> int:
    if not shape["full"]:
        return UNBOUNDED
    window = shape["window"] if shape["sliding"] else None
    spare = max(0.0, pool_bytes - shape["state"])
    return longest_request(spare, shape["full"], shape["sliding"], window, shape["chunk"], block)


def _capacity(out: dict[str, Any], est: dict[str, Any], shape: dict[str, Any] | None,
              length: int | None, pool: int | None, conc: float | None) -> None:
    """Fill pool, concurrency, longest request and fit: engine first, estimate after."""
    block = out["block_size"] or 16
    if pool:
        out["kv_pool_tokens"], out["kv_pool_source"] = pool, ENGINE
    elif est["kv_pool_tokens"] is not None:
        out["kv_pool_tokens"], out["kv_pool_source"] = est["kv_pool_tokens"], ESTIMATE
    if conc and length:
        out["max_concurrency"], out["max_concurrency_source"] = round(conc, 2), ENGINE
        out["request_fits"] = conc >= 1.0
        if shape:
            out["longest_request_tokens"] = _longest(shape, conc * _need(shape, length, block),
                                                     block)
            how = "the model's per-request KV arithmetic"
        else:
            out["longest_request_tokens"] = int(length * conc)
            how = "full attention assumed"
        out["longest_request_source"] = (f"the engine's maximum concurrency {conc:g}x for "
                                         f"{length} tokens ({how})")
    elif pool:
        if shape and out["hybrid"]:
            per_token = shape["full"] + shape["sliding"]
            out["longest_request_tokens"] = _longest(shape, pool * per_token, block)
            how = ("with the model's per-request KV arithmetic (sliding layers hold window + "
                   "one chunk)")
        else:
            out["longest_request_tokens"] = pool
            how = "(full attention: one token of pool per token of request)"
        out["longest_request_source"] = f"the engine's pool of {pool} tokens {how}"
    elif est["longest_request_tokens"] is not None:
        out["longest_request_tokens"] = est["longest_request_tokens"]
        out["longest_request_source"] = f"estimate ({est['source']})"
    if out["max_concurrency"] is None:
        if pool and shape and length:
            need = _need(shape, length, block)
            out["max_concurrency"] = round(pool * (shape["full"] + shape["sliding"]) / need, 2)
            out["max_concurrency_source"] = "engine pool with the model's request arithmetic"
        elif est["max_concurrency"] is not None:
            out["max_concurrency"], out["max_concurrency_source"] = (est["max_concurrency"],
                                                                     ESTIMATE)
    if length and out["longest_request_tokens"] is not None and out["request_fits"] is None:
        out["request_fits"] = out["longest_request_tokens"] >= length


def _sentence(out: dict[str, Any]) -> str | None:
    parts = []
    if out["kv_pool_tokens"] is not None:
        parts.append(f"KV pool {out['kv_pool_tokens']} tokens ({out['kv_pool_source']})")
    if out["max_concurrency"] is not None and out["max_model_len"]:
        parts.append(f"maximum concurrency {out['max_concurrency']:g}x for "
                     f"{out['max_model_len']} tokens ({out['max_concurrency_source']})")
    longest = out["longest_request_tokens"]
    if longest is not None:
        shown = "unbounded by KV (sliding window only)" if longest >= UNBOUNDED \
            else f"{longest} tokens"
        parts.append(f"one request up to {shown} ({out['longest_request_source']})")
    return "; ".join(parts) or None


def cap_for_length(model: dict[str, Any], margin: float = 0.05, step: int = 1024) -> int | None:
    """Longest ``max_model_len`` to recommend from this model: the longest request minus
    ``margin``, rounded down to ``step``, never above the native context. None when the
    longest request is unknown."""
    longest = model.get("longest_request_tokens")
    if longest is None:
        return None
    cap = int(longest * (1 - margin)) // step * step if longest < UNBOUNDED else None
    native = model.get("native_context")
    values = [v for v in (cap, native) if v]
    return min(values) if values else None
