"""One capacity model per server (audit.kb.servermodel, context key ``server_model``): the
engine's own figures first, the estimate where they are absent, the same hybrid arithmetic."""

from __future__ import annotations

import pytest
from casekit import seed_report

from audit.kb.context import build_context
from audit.kb.engine import load_rules

KB = load_rules()
STARTUP = {"LIGHT": ("85000", "5312", "2.59"), "PUSH": ("244000", "15250", "6.11")}


def _cache(pool: str | None, blocks: str, conc: str) -> str:
    size = f'kv_cache_size_tokens="{pool}",' if pool else ""
    return ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",'
            f'cache_dtype="fp8",engine="0",kv_cache_max_concurrency="{conc}",{size}'
            f'num_gpu_blocks="{blocks}"}} 1.0\n')


def _ctx(recipe: str, metrics: str | None = None) -> dict:
    report = seed_report(recipe, metrics=metrics)
    return build_context(report["servers"][0], report)


@pytest.mark.parametrize("recipe", ["LIGHT", "PUSH"])
@pytest.mark.parametrize("startup", [False, True])
def test_the_seed_recipes_raise_nothing_above_medium(recipe: str, startup: bool) -> None:
    ctx = _ctx(recipe, _cache(*STARTUP[recipe]) if startup else None)
    above = [f"{f.rule_id} ({f.severity})" for f in KB.evaluate(ctx)
             if f.severity in ("critical", "high")]
    assert above == []


def test_the_engines_concurrency_decides_whether_one_request_fits() -> None:
    model = _ctx("PUSH", _cache(*STARTUP["PUSH"]))["server_model"]
    assert model["kv_pool_source"] == "engine" and model["kv_pool_tokens"] == 244000
    assert model["max_concurrency"] == 6.11 and model["max_concurrency_source"] == "engine"
    # a 262144-token request on a 244K pool: the sliding layers hold window + one chunk
    assert model["hybrid"] and model["request_fits"]
    assert model["longest_request_tokens"] > 262144
    assert "6.11x" in model["arithmetic_text"]
    starved = _ctx("PUSH", _cache("40000", "2500", "0.8"))["server_model"]
    assert starved["request_fits"] is False


def test_without_the_engines_figures_the_estimate_is_used_and_said() -> None:
    model = _ctx("PUSH")["server_model"]
    assert model["kv_pool_source"] == "estimate"
    assert model["max_concurrency_source"] == "estimate"
    assert model["request_fits"] is True
    assert 0.8 < model["max_concurrency"] / 6.11 < 1.2  # the estimate is near the engine's


def test_the_engines_max_model_len_wins_over_the_argv() -> None:
    report = seed_report("LIGHT")
    report["servers"][0]["models"] = [{"id": "gemma", "max_model_len": 30000}]
    model = build_context(report["servers"][0], report)["server_model"]
    assert model["max_model_len"] == 30000
    assert "v1/models" in model["max_model_len_source"]
    assert model["native_context"] == 262144


def test_a_pool_without_a_concurrency_figure_uses_the_request_arithmetic() -> None:
    # 5,000 blocks of 16 = 80,000 pool tokens: far below 262144, yet the hybrid request
    # (sliding layers capped) fits; a 2,000-token pool does not hold it.
    fits = _ctx("PUSH", _cache(None, "5000", "None"))["server_model"]
    assert fits["kv_pool_tokens"] == 80000 and fits["request_fits"] is True
    short = _ctx("PUSH", _cache(None, "125", "None"))["server_model"]
    assert short["request_fits"] is False
