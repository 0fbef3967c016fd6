"""The knowledge base against real vLLM bug reports it was not built from.

Part 1 turns every case in tests/audit/more_cases/*.json (same shape as the shared cases:
source_url, vllm_version, gpus, argv, env, symptom, root_cause, fixed_in, expected_finding,
confidence) into a contract report with ``casekit.case_to_report``, builds the contexts and
asserts that the rule carrying the case's diagnosis fires at a severity that makes an operator
act. Part 2 checks the rules added or generalised for these cases on hand-built contexts: they
fire on their cause and stay silent on the near miss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402
from ctxfactory import make_context  # noqa: E402
from mined_cases import EXPECTATIONS as MINED_EXPECTATIONS  # noqa: E402

MORE_CASES = Path(__file__).resolve().parent / "more_cases"

# Case prefix -> (rule ids that must all fire, minimum severity). Comments give the diagnosis.
EXPECTATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    # #15105: 0.8.0 V1 default max_num_seqs 1024, sampler warm-up OOM even at util 0.78.
    "101": (("up-v1-default-max-num-seqs-oom",), "high"),
    # #15216: 0.8.0 on a 12 GB RTX 3060, no --max-num-seqs.
    "102": (("up-v1-default-max-num-seqs-oom",), "high"),
    # #14696: gemma-3-4b-it in float16 on 0.8.3 returns empty text.
    "103": (("up-gemma2-gemma3-fp16",), "critical"),
    # #44494: Gemma 4 12B on 0.22.0 through the Transformers fallback.
    "104": (("up-gemma4-12b-transformers-fallback",), "high"),
    # #35720: FP8 (e4m3) KV on a V100 with 0.16.0: Triton fp8e4nv crash.
    "105": (("up-fp8-kv-pre-ada",), "high"),
    # #26431: FP8 KV on RTX 3090 with 0.11.0 V1. Medium only: test_cases.py pins the Ampere
    # scenario at medium; the message names the start-up crash (see the report).
    "106": (("up-fp8-kv-pre-ada",), "medium"),
    # #2652: TP 8 does not divide the 28 heads of Qwen2-57B-A14B.
    "107": (("up-tp-not-dividing-attention-heads",), "critical"),
    # #414: TP 3 does not divide the 52 heads of LLaMA 33B.
    "108": (("up-tp-not-dividing-attention-heads",), "critical"),
    # #52768: Gemma 4 on 0.27.1 (transformers 5.15): AmbiguousGlobalPerLayerAttributeError.
    # A report of a running 0.27.1 server is advice (medium); its failed start (the log
    # signature) is high/critical through audit/crashloop.py (tests/audit/test_log_signatures).
    "109": (("upm-gemma4-transformers-515-head-dim",), "medium"),
    # #13147: FP8 KV on an AMD RDNA3 W7900 (no e4m3) with prefix caching.
    "110": (("up-fp8-kv-pre-ada",), "high"),
    # #21544: Qwen3-Coder-480B with the hermes parser on 0.9.2 (--flag=value argv form).
    "111": (("up-tool-parser-model-mismatch",), "high"),
    # #8793: --max-model-len 131072 above Qwen2.5-72B's 32768 positions without YaRN.
    "112": (("up-max-model-len-above-native-context",), "high"),
    # #18538: --enable-reasoning on 0.10.0 is an unrecognized argument.
    "113": (("up-removed-flags",), "high"),
    # recipes#515: Gemma 4 parsers and template on a Gemma 3 checkpoint (0.22.1).
    "114": (("up-reasoning-parser-model-mismatch", "up-tool-parser-model-mismatch"), "high"),
    # #17581: Qwen3-30B-A3B-FP8 on 2x RTX 3090 (0.8.5): fused-MoE fp8e4nv failure.
    "115": (("up-fp8-weights-pre-ada",), "high"),
    # #54318: Qwen3.8-Flash-Next-FP8 on 4x A100 with a model-launch image tag.
    "116": (("up-fp8-weights-pre-ada",), "high"),
    # 2NN: rules mined from the vLLM tracker (tests/audit/mined_cases.py).
    **MINED_EXPECTATIONS,
}


@pytest.fixture(scope="module")
def kb():
    """The whole knowledge base, as the product loads it."""
    return load_rules()


def _case_files() -> list[Path]:
    return sorted(MORE_CASES.glob("*.json"))


def test_every_more_case_has_an_expectation_and_the_shared_case_fields():
    prefixes = {p.name.split("-", 1)[0] for p in _case_files()}
    assert prefixes == set(EXPECTATIONS)
    fields = {"source_url", "vllm_version", "gpus", "argv", "env", "symptom", "root_cause",
              "fixed_in", "expected_finding", "confidence"}
    for path in _case_files():
        case = json.loads(path.read_text(encoding="utf-8"))
        assert fields <= set(case), f"{path.name} lacks {sorted(fields - set(case))}"
        assert case["source_url"].startswith("https://github.com/")


def test_no_more_case_repeats_a_shared_case():
    shared = {json.loads(p.read_text())["source_url"] for p in casekit.all_case_paths()}
    mine = {json.loads(p.read_text())["source_url"] for p in _case_files()}
    assert not shared & mine


@pytest.mark.parametrize("path", _case_files(), ids=lambda p: p.stem)
def test_the_knowledge_base_gives_the_unseen_case_diagnosis_at_an_acting_severity(kb, path):
    expected, minimum = EXPECTATIONS[path.name.split("-", 1)[0]]
    fired, failures = casekit.evaluate_case(kb, path)
    summary = sorted((rule_id, f.severity) for rule_id, f in fired.items())
    assert not failures, failures
    for rule_id in expected:
        assert rule_id in fired, f"{path.name}: expected {rule_id}; fired {summary}"
        finding = fired[rule_id]
        assert casekit.at_least(finding.severity, minimum), (
            f"{path.name}: {rule_id} at {finding.severity}, needs >= {minimum}")
        assert finding.references and finding.message


def test_the_fp8_kv_finding_names_the_triton_crash_on_ampere(kb):
    fired, _ = casekit.evaluate_case(kb, next(p for p in _case_files() if p.name.startswith("106")))
    assert "fp8e4nv" in fired["up-fp8-kv-pre-ada"].message


# ----------------------------------------------------------------------------- part 2

A100 = {"count": 1, "name": "NVIDIA A100-SXM4-80GB", "known": True, "memory_gib": 79.2,
        "bandwidth_tbs": 2.04, "compute_capability": "8.0", "cc": 8.0, "arch": "ampere",
        "fp8": False, "fp4": False, "unified_memory": False,
        "bandwidth_knee_max_num_seqs": 64, "per_server_count": 1, "vendor": "nvidia"}
V100 = {**A100, "name": "Tesla V100-SXM2-32GB", "memory_gib": 31.7,
        "compute_capability": "7.0", "cc": 7.0, "arch": "volta"}
W7900 = {**A100, "name": "AMD Radeon PRO W7900", "memory_gib": 48.0, "compute_capability": None,
         "cc": None, "arch": "rdna3", "vendor": "amd"}
MI300X = {**W7900, "name": "AMD Instinct MI300X", "memory_gib": 192.0, "arch": "cdna3",
          "fp8": True}
GEMMA4 = {"model.id": "google/gemma-4-31B-it", "model.family": "gemma4-31b",
          "model.is_gemma4": True}

SCENARIOS: list[tuple[str, str, dict[str, Any], str | None]] = [
    # Sampler warm-up headroom: 24 GB at 0.78 leaves ~5.3 GiB outside the budget.
    ("up-v1-default-max-num-seqs-oom", "plain",
     {"vllm.version": "0.8.0", "gpu.memory_gib": 24.0, "flags.gpu_memory_utilization": 0.78},
     "high"),
    ("up-v1-default-max-num-seqs-oom", "plain",
     {"vllm.version": "0.8.0", "gpu.memory_gib": 79.2, "flags.gpu_memory_utilization": 0.9},
     None),
    ("up-v1-default-max-num-seqs-oom", "plain",
     {"vllm.version": "0.8.0", "gpu.memory_gib": 24.0, "flags.gpu_memory_utilization": 0.78,
      "flags_meta.set": ["model", "max_num_seqs"]}, None),
    ("up-v1-default-max-num-seqs-oom", "plain",
     {"vllm.version": "0.8.5", "gpu.memory_gib": 24.0}, None),
    # FP8 KV: crash-level on Volta and on AMD without FP8; e5m2 and FP8 GPUs are spared.
    ("up-fp8-kv-pre-ada", "plain", {"gpu": V100, "flags.kv_cache_dtype": "fp8"}, "high"),
    ("up-fp8-kv-pre-ada", "plain", {"gpu": A100, "flags.kv_cache_dtype": "fp8"}, "medium"),
    # e5m2 on Ampere is storage only, upcast for the math: the rule's own fallback, quiet
    ("up-fp8-kv-pre-ada", "plain", {"gpu": A100, "flags.kv_cache_dtype": "fp8_e5m2"}, None),
    ("up-fp8-kv-pre-ada", "plain",
     {"gpu": {**A100, "cc": None, "compute_capability": None},
      "flags.kv_cache_dtype": "fp8_e5m2"}, None),
    ("up-fp8-kv-pre-ada", "plain", {"gpu": V100, "flags.kv_cache_dtype": "fp8_e5m2"},
     "medium"),
    ("up-fp8-kv-pre-ada", "plain", {"gpu": W7900, "flags.kv_cache_dtype": "fp8"}, "high"),
    ("up-fp8-kv-pre-ada", "plain", {"gpu": MI300X, "flags.kv_cache_dtype": "fp8"}, None),
    ("up-fp8-kv-pre-ada", "plain", {"gpu": W7900, "flags.kv_cache_dtype": "auto"}, None),
    # float16-unsafe families beyond Gemma 2/3.
    ("up-gemma2-gemma3-fp16", "plain",
     {"model.id": "THUDM/GLM-4-32B-0414", "model.family": "glm4-0414", "flags.dtype": "float16"},
     "critical"),
    ("up-gemma2-gemma3-fp16", "plain",
     {"model.id": "THUDM/GLM-4-32B-0414", "model.family": "glm4-0414",
      "flags.dtype": "bfloat16"}, None),
    ("up-gemma2-gemma3-fp16", "plain",
     {"model.id": "zai-org/GLM-4.5-Air", "model.family": "glm", "flags.dtype": "float16"},
     None),
    # Gemma 4 + transformers 5.15 on 0.27.x.
    # A running 0.27.x server proves its transformers works: advice, not "will not come back".
    ("upm-gemma4-transformers-515-head-dim", "plain",
     {**GEMMA4, "vllm.version": "0.27.1"}, "medium"),
    # A pending upgrade onto 0.27.x: the restart loads the new environment.
    ("upm-gemma4-transformers-515-head-dim", "plain",
     {**GEMMA4, "vllm.version": "0.25.1", "vllm.installed": "0.27.1",
      "vllm.pending_upgrade": True}, "high"),
    ("upm-gemma4-transformers-515-head-dim", "plain",
     {**GEMMA4, "vllm.version": "0.25.1", "vllm.installed": "0.28.0",
      "vllm.pending_upgrade": True}, None),
    ("upm-gemma4-transformers-515-head-dim", "plain",
     {**GEMMA4, "vllm.version": "0.28.0"}, None),
    ("upm-gemma4-transformers-515-head-dim", "plain", {"vllm.version": "0.27.0"}, None),
    ("upm-gemma4-transformers-515-head-dim", "light", {}, None),
    # Chunked prefill off: one scheduler step must hold a whole prompt.
    ("upm-no-chunked-prefill-batched-tokens-below-max-len", "plain",
     {"vllm.version": "0.24.0", "flags.enable_chunked_prefill": False,
      "flags.max_num_batched_tokens": 8192, "flags.max_model_len": 131072,
      "flags_meta.set": ["model", "max_num_batched_tokens", "enable_chunked_prefill"]},
     "critical"),
    ("upm-no-chunked-prefill-batched-tokens-below-max-len", "plain",
     {"vllm.version": "0.24.0", "flags.enable_chunked_prefill": True,
      "flags.max_num_batched_tokens": 8192, "flags.max_model_len": 131072,
      "flags_meta.set": ["model", "max_num_batched_tokens"]}, None),
    ("upm-no-chunked-prefill-batched-tokens-below-max-len", "plain",
     {"vllm.version": "0.24.0", "flags.enable_chunked_prefill": False,
      "flags.max_num_batched_tokens": 131072, "flags.max_model_len": 131072,
      "flags_meta.set": ["model", "max_num_batched_tokens", "enable_chunked_prefill"]}, None),
    ("upm-no-chunked-prefill-batched-tokens-below-max-len", "push", {}, None),
]


@pytest.mark.parametrize(
    ("rule_id", "preset", "overrides", "expected"), SCENARIOS,
    ids=[f"{s[0]}-{i}-{s[3] or 'silent'}" for i, s in enumerate(SCENARIOS)])
def test_a_hardened_rule_fires_on_its_cause_and_stays_silent_on_the_near_miss(
        kb, rule_id, preset, overrides, expected):
    if kb.rule(rule_id).predicts == "startup_failure":
        # A start-up failure is claimed for a server not seen serving (the presets serve).
        overrides = {"server.serving": False, **overrides}
    evaluation = kb.evaluate(make_context(preset, overrides))
    mine = [f for f in evaluation if f.rule_id == rule_id]
    assert not [x for x in evaluation.failures if x.rule_id.startswith("up")], (
        evaluation.failures)
    if expected is None:
        assert not mine, f"{rule_id} fired on the near miss: {mine[0].message}"
    else:
        assert mine, f"{rule_id} stayed silent; fired {[f.rule_id for f in evaluation]}"
        assert mine[0].severity == expected


def test_every_more_rule_has_a_scenario_and_cites_a_confirmed_or_open_upstream_source(kb):
    more = [r for r in kb.rules if r.id.startswith("upm-")]
    assert more
    covered = {s[0] for s in SCENARIOS}
    for rule in more:
        assert rule.id in covered, rule.id
        assert rule.confirmed_upstream is not None, rule.id
        assert any(ref.startswith("https://github.com/") for ref in rule.references)
        assert str(rule.last_verified) == "2026-11-29"


@pytest.mark.parametrize("preset", ["light", "push"])
def test_the_seed_recipes_raise_nothing_above_medium_from_the_hardened_rules(kb, preset):
    loud = [(f.rule_id, f.severity) for f in kb.evaluate(make_context(preset))
            if f.rule_id.startswith("upm-") and not casekit.at_least("medium", f.severity)]
    assert loud == []
