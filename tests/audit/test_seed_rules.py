"""Checklist items K01-K24 (docs/knowledge-checklist.md) as rules of
audit/rules/gemma4_seed.yaml (K01-K11) and gemma4_seed_ceilings.yaml (K12-K24).

Each item fires where it applies, at the severity the checklist asks for, and stays silent
on the near miss. Hand-built contexts come from tests/audit/ctxfactory.py; the seed
recipes are also built from real agent reports (tests/audit/casekit.py + audit.kb.context),
where the whole knowledge base (seed + upstream rules) must raise nothing above medium.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.context import build_contexts
from audit.kb.engine import RULES_DIR, SEVERITY_RANK, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import (  # noqa: E402
    metrics_text,
    recipe_argv,
    report_skeleton,
    seed_report,
    server_entry,
)
from ctxfactory import make_context  # noqa: E402

SEED_KB = load_rules([RULES_DIR / "_kb.yaml", RULES_DIR / "gemma4_seed.yaml",
                      RULES_DIR / "gemma4_seed_ceilings.yaml"])
FULL_KB = load_rules()

MTP_31B = {"model.speculative.method": "mtp",
           "model.speculative.model": "google/gemma-4-31B-it-assistant"}
NO_KWARGS = {"flags.default_chat_template_kwargs": None}
THINKING_OFF = {"flags.default_chat_template_kwargs": {"enable_thinking": False}}
NO_SPEC = {"model.speculative.method": None, "model.speculative.model": None}
GB10 = {"gpu.name": "NVIDIA GB10", "gpu.memory_gib": 119.7, "gpu.bandwidth_tbs": 0.273,
        "gpu.compute_capability": "12.1", "gpu.cc": 12.1, "gpu.arch": "blackwell",
        "gpu.fp4": True, "gpu.unified_memory": True, "gpu.bandwidth_knee_max_num_seqs": 8}
A4B_NVFP4_MTP = {"model.family": "gemma4-26b-a4b", "model.quantization": "nvfp4",
                 "model.is_int4": False, "model.id": "nvidia/Gemma-4-26B-A4B-NVFP4",
                 "model.speculative.method": "mtp",
                 "model.speculative.model": "google/gemma-4-26B-A4B-it-assistant"}
NVFP4_31B_EAGLE3 = {"model.quantization": "nvfp4", "model.is_int4": False,
                    "model.id": "nvidia/Gemma-4-31B-IT-NVFP4"}


def spec_window(rate: float, drafted: int = 5000, lifetime: float | None = None) -> dict:
    """Overrides for a speculative-decoding window with acceptance ``rate``."""
    out = {"metrics.spec_acceptance_rate": rate, "metrics.spec_draft_tokens": drafted,
           "metrics.spec_accepted_tokens": int(rate * drafted),
           "metrics.spec_mean_acceptance_length": 1 + 3 * rate}
    if lifetime is not None:
        out["metrics.lifetime.spec_acceptance_rate"] = lifetime
    return out


def fired(preset: str, overrides: dict[str, Any] | None = None, kb=SEED_KB) -> dict:
    result = kb.evaluate(make_context(preset, overrides))
    assert result.failures == [], result.failures
    return {f.rule_id: f for f in result}


# (sentence, preset, overrides, rule id, expected severity)
FIRES = [
    ("K01 Gemma 4 on 0.26.0 is past the version ceiling", "light",
     {"vllm.version": "0.26.0"}, "gemma4-version-ceiling", "high"),
    ("K01 a 0.29.1rc1 dev build counts as inside the ceiling range", "push",
     {"vllm.version": "0.29.1rc1.dev339+gda9888462"}, "gemma4-version-ceiling", "high"),
    ("K01 an installed 0.27.0 makes the next restart a risky upgrade", "light",
     {"vllm.pending_upgrade": True, "vllm.installed": "0.27.0"},
     "gemma4-pending-upgrade-into-ceiling", "medium"),
    ("K02 no server-side enable_thinking on 0.25.1 leaks turn markers", "light",
     {**NO_KWARGS, **NO_SPEC}, "gemma4-streamed-turn-leak", "medium"),
    ("K02 EAGLE3 amplifies the leak", "light", NO_KWARGS, "gemma4-streamed-turn-leak", "high"),
    ("K02 the untested 0.25.0 between clean 0.24.0 and leaking 0.25.1 is an advisory",
     "light", {**NO_KWARGS, "vllm.version": "0.25.0"}, "gemma4-streamed-turn-leak-untested",
     "low"),
    ("K02 the 0.29.0 fix is still unconfirmed", "light",
     {**NO_KWARGS, "vllm.version": "0.29.0"}, "gemma4-streamed-turn-leak-fix-unconfirmed", "low"),
    ("K03 the gemma4 tool parser does not enforce forced tool_choice", "light", {},
     "gemma4-forced-tool-choice-unenforced", "low"),
    ("K04 Model Runner V2 on 0.26.0 with EAGLE3 OOMs under load", "light",
     {"vllm.version": "0.26.0"}, "gemma4-mrv2-kv-overreport-oom", "high"),
    ("K04 without a speculator on an 80 GB card it is medium", "light",
     {"vllm.version": "0.28.0", **NO_SPEC}, "gemma4-mrv2-kv-overreport-oom", "medium"),
    ("K05 EAGLE3 at TP=2 is an advisory", "push", {}, "eagle-tp-drafter-mismatch-advisory",
     "low"),
    ("K05 right after an upgrade the advisory is medium", "push",
     {"vllm.version_changed": True, "vllm.previous": "0.24.0"},
     "eagle-tp-drafter-mismatch-advisory", "medium"),
    ("K05 live acceptance of 15% at TP=2 is a collapse", "push", spec_window(0.15),
     "eagle-tp-acceptance-collapse", "high"),
    ("K05 live acceptance of 3% at TP=2 is critical", "push", spec_window(0.03),
     "eagle-tp-acceptance-collapse", "critical"),
    ("K06 CoT leaks into content before 0.24.0 with thinking on", "light",
     {"vllm.version": "0.23.0"}, "gemma4-thinking-tools-cot-leak", "high"),
    ("K06 with thinking left to clients it is medium", "light",
     {"vllm.version": "0.23.0", **NO_KWARGS}, "gemma4-thinking-tools-cot-leak", "medium"),
    ("K06 CoT is silently dropped from 0.24.0 on", "light", {},
     "gemma4-thinking-tools-cot-dropped", "low"),
    ("K07 bare tool-call openers are dropped before 0.30.0", "light", {},
     "gemma4-bare-tool-call-opener-dropped", "low"),
    ("K08 multimodal prefill scans the full KV range before 0.30.0", "light", {},
     "gemma4-multimodal-prefill-full-kv-scan", "info"),
    ("K08 images actually served make it a low finding", "light", {"metrics.mm_items": 40},
     "gemma4-multimodal-prefill-traffic-slow", "low"),
    ("K09 MTP before 0.29.0 without server-side enable_thinking amplifies the leak", "light",
     {**MTP_31B, **NO_KWARGS, "model.is_int4": False},
     "gemma4-mtp-amplifies-turn-leak", "high"),
    ("K09 with enable_thinking set server-side only the seed statement remains", "light",
     {**MTP_31B, "model.is_int4": False}, "gemma4-mtp-amplifies-turn-leak", "low"),
    ("K10 the 31B DSpark speculator does not load", "light",
     {"model.speculative.method": "dspark",
      "model.speculative.model": "RedHatAI/gemma-4-31B-it-speculator.dspark"},
     "gemma4-31b-dspark-speculator-fails", "high"),
    ("K11 FLASH_ATTN forced on Gemma 4", "light", {"flags.attention_backend": "FLASH_ATTN"},
     "gemma4-attention-backend-override", "high"),
    ("K12 the default 1024 sequences on one H100 is far past the knee", "light",
     {"flags.max_num_seqs": 1024}, "gemma4-max-num-seqs-above-bandwidth-knee", "low"),
    ("K13 utilization 0.95 hits the capture cliff", "push",
     {"flags.gpu_memory_utilization": 0.95}, "gpu-memory-utilization-capture-cliff", "high"),
    ("K13 utilization 0.97 is critical", "push", {"flags.gpu_memory_utilization": 0.97},
     "gpu-memory-utilization-capture-cliff", "critical"),
    ("K13 images served at 0.94 are medium", "push", {"metrics.mm_items": 12},
     "gpu-memory-utilization-multimodal-traffic", "medium"),
    ("K13 images served at 0.94 on a 16 GB card are high", "light",
     {"metrics.mm_items": 3, "flags.gpu_memory_utilization": 0.94, "gpu.memory_gib": 16.0},
     "gpu-memory-utilization-multimodal-traffic", "high"),
    ("K14 MTP on the AWQ 4-bit target accepts nothing", "light", MTP_31B,
     "gemma4-mtp-on-int4-target", "critical"),
    ("K15 parallel drafting with the vanilla EAGLE3 checkpoint fails init", "light",
     {"model.speculative.parallel_drafting": True},
     "spec-parallel-drafting-vanilla-eagle3", "high"),
    ("K16 DFlash on an Ada L40S is unsupported", "plain",
     {"model.speculative.method": "dflash", "model.speculative.model": "z-lab/dflash-8b"},
     "spec-dflash-on-ada", "high"),
    ("K17 an engine max concurrency of 1.02x is a cliff-edge boot", "push",
     {"metrics.kv_max_concurrency": 1.02}, "max-model-len-kv-cliff-edge", "medium"),
    ("K17 max_model_len above the geometry estimate cannot boot", "light",
     {"metrics.kv_max_concurrency": None, "flags.max_model_len": 131072,
      "geometry.single_request_max_tokens_estimate": 100000},
     "max-model-len-above-kv-estimate", "high"),
    ("K17 max_model_len within 5% of the estimate is at the edge", "light",
     {"metrics.kv_max_concurrency": None, "flags.max_model_len": 98000,
      "geometry.single_request_max_tokens_estimate": 100000},
     "max-model-len-above-kv-estimate", "medium"),
    ("K17 an unknown model's max_model_len cannot be checked", "plain",
     {"metrics.kv_max_concurrency": None, "flags.max_model_len": 65536,
      "flags_meta.set": ["model", "max_model_len"]}, "max-model-len-cannot-check", "info"),
    ("K18 a restart without a change is a config failure", "light",
     {"vllm.restarted": True, "vllm.restarted_without_change": True, "vllm.restarts": 1},
     "restart-without-config-change", "medium"),
    ("K18 repeated restarts are high", "light",
     {"vllm.restarted": True, "vllm.restarted_without_change": True, "vllm.restarts": 3},
     "restart-without-config-change", "high"),
    ("K19 the frozen quant template is high", "light", {"template.identity": "frozen"},
     "gemma4-chat-template-frozen", "high"),
    ("K19 the 2026-05-28 template is medium", "light", {"template.identity": "intermediate"},
     "gemma4-chat-template-intermediate", "medium"),
    ("K19 an unknown template hash is unvetted", "light", {"template.identity": "unknown"},
     "gemma4-chat-template-unvetted", "low"),
    ("K20 a pre-squash revision pin crash-loops on a cold boot", "light",
     {"flags.revision": "0123abcd9876"}, "cyankiwi-revision-pin-squashed", "high"),
    ("K20 the AWQ head pinned on the qat repo is wrong too", "light",
     {"flags.model": "cyankiwi/gemma-4-31B-it-qat-AWQ-INT4", "flags.revision": "6f1b616c"},
     "cyankiwi-revision-pin-squashed", "high"),
    ("K21 35% acceptance is the random-prompt band, not a collapse", "light", spec_window(0.35),
     "eagle-acceptance-random-prompt-band", "info"),
    ("K22 more than 128 sequences with MTP on GB10 is past the measured ceiling", "light",
     {**GB10, **A4B_NVFP4_MTP, "flags.max_num_seqs": 256},
     "gemma4-mtp-unified-memory-concurrency-ceiling", "medium"),
    ("K22 the c256 collapse signature is critical", "light",
     {"metrics.ttft_p50_s": 13.3, "metrics.requests_waiting": 240,
      "metrics.kv_cache_usage": 0.98, "metrics.generation_tps": 0.15},
     "serving-queue-collapse", "critical"),
    ("K22 a last window that collapsed while the lifetime was healthy is flagged", "light",
     {"metrics.ttft_p50_s": 12.0, "metrics.requests_waiting": 30,
      "metrics.kv_cache_usage": 0.7, "metrics.lifetime.ttft_p50_s": 0.8},
     "serving-queue-collapse", "high"),
    ("K23 31B NVFP4 EAGLE3 single-stream TPOT of 200 ms is far off the 68 ms baseline",
     "light", {**GB10, **NVFP4_31B_EAGLE3, "metrics.requests_running": 1,
               "metrics.tpot_p50_s": 0.2}, "gemma4-31b-nvfp4-eagle3-single-stream-slow",
     "medium"),
    ("K23 31B EAGLE3 acceptance under half its 47% baseline", "light", spec_window(0.15),
     "gemma4-spec-acceptance-below-baseline", "medium"),
    ("K23 acceptance near zero is high", "light", spec_window(0.02),
     "gemma4-spec-acceptance-below-baseline", "high"),
    ("K24 26B-A4B MTP acceptance of 20% is under half its 58% baseline", "light",
     {**A4B_NVFP4_MTP, **spec_window(0.20)}, "gemma4-spec-acceptance-below-baseline",
     "medium"),
]

# (sentence, preset, overrides, rule id that must stay silent)
SILENT = [
    ("K01 the 0.25.1 recipe is at the ceiling, not past it", "light", {},
     "gemma4-version-ceiling"),
    ("K01 a non-Gemma model on 0.26.0 is not affected", "plain", {"vllm.version": "0.26.0"},
     "gemma4-version-ceiling"),
    ("K01 no pending upgrade when the installed version is the running one", "light", {},
     "gemma4-pending-upgrade-into-ceiling"),
    ("K02 enable_thinking set server-side mitigates the leak", "light", {},
     "gemma4-streamed-turn-leak"),
    ("K02 0.24.0 was clean", "light", {**NO_KWARGS, "vllm.version": "0.24.0"},
     "gemma4-streamed-turn-leak"),
    ("K02 0.29.0 with enable_thinking set server-side", "light", {"vllm.version": "0.29.0"},
     "gemma4-streamed-turn-leak-fix-unconfirmed"),
    ("K02 an untested 0.25.0 is not reported as a reproduced leak", "light",
     {**NO_KWARGS, "vllm.version": "0.25.0"}, "gemma4-streamed-turn-leak"),
    ("K02 the 0.25.1 reproduction is not called untested", "light", NO_KWARGS,
     "gemma4-streamed-turn-leak-untested"),
    ("K02 0.24.0 is not untested either", "light", {**NO_KWARGS, "vllm.version": "0.24.0"},
     "gemma4-streamed-turn-leak-untested"),
    ("K03 another tool parser", "light", {"flags.tool_call_parser": "hermes"},
     "gemma4-forced-tool-choice-unenforced"),
    ("K04 enforce-eager removes the capture-headroom gap", "light",
     {"vllm.version": "0.26.0", "flags.enforce_eager": True}, "gemma4-mrv2-kv-overreport-oom"),
    ("K04 0.25.1 predates the Model Runner V2 regression", "light", {},
     "gemma4-mrv2-kv-overreport-oom"),
    ("K05 EAGLE3 at TP=1 has one rank", "light", {}, "eagle-tp-drafter-mismatch-advisory"),
    ("K05 35% acceptance at TP=2 is the random-prompt band", "push", spec_window(0.35),
     "eagle-tp-acceptance-collapse"),
    ("K05 too few drafted tokens to judge", "push", spec_window(0.1, drafted=300),
     "eagle-tp-acceptance-collapse"),
    ("K06 thinking off server-side before 0.24.0", "light",
     {"vllm.version": "0.23.0", **THINKING_OFF}, "gemma4-thinking-tools-cot-leak"),
    ("K06 the intermediate template has no open thought channel", "light",
     {"vllm.version": "0.23.0", "template.identity": "intermediate"},
     "gemma4-thinking-tools-cot-leak"),
    ("K06 thinking off server-side from 0.24.0", "light", THINKING_OFF,
     "gemma4-thinking-tools-cot-dropped"),
    ("K07 0.30.0 carries the fix", "light", {"vllm.version": "0.30.0"},
     "gemma4-bare-tool-call-opener-dropped"),
    ("K08 a text-only server", "light", {"model.multimodal": False},
     "gemma4-multimodal-prefill-full-kv-scan"),
    ("K08 0.30.0 carries the pruning fix", "light", {"vllm.version": "0.30.0"},
     "gemma4-multimodal-prefill-full-kv-scan"),
    ("K08 no images in the window", "light", {}, "gemma4-multimodal-prefill-traffic-slow"),
    ("K09 MTP on 0.29.0", "light", {**MTP_31B, "vllm.version": "0.29.0"},
     "gemma4-mtp-amplifies-turn-leak"),
    ("K09 MTP on 0.24.0, where the reporter's MTP matrix was clean", "light",
     {**MTP_31B, **NO_KWARGS, "vllm.version": "0.24.0"}, "gemma4-mtp-amplifies-turn-leak"),
    ("K10 the 12B DSpark draft model is supported", "light",
     {"model.family": "gemma4-12b", "model.speculative.method": "dspark",
      "model.speculative.model": "deepseek-ai/dspark_gemma4_12b_block7"},
     "gemma4-31b-dspark-speculator-fails"),
    ("K11 TRITON_ATTN set explicitly", "light", {"flags.attention_backend": "TRITON_ATTN"},
     "gemma4-attention-backend-override"),
    ("K12 the LIGHT recipe's 64 sequences", "light", {},
     "gemma4-max-num-seqs-above-bandwidth-knee"),
    ("K12 the PUSH recipe's 256 sequences at TP=2 are headroom", "push", {},
     "gemma4-max-num-seqs-above-bandwidth-knee"),
    ("K12 the bandwidth-scaled knee is not applied to unified memory (seeds 001/003)",
     "light", {**GB10, "flags.max_num_seqs": 256},
     "gemma4-max-num-seqs-above-bandwidth-knee"),
    ("K12 the 31B knee is not applied to the 26B-A4B MoE", "light",
     {"model.family": "gemma4-26b-a4b", "flags.max_num_seqs": 1024},
     "gemma4-max-num-seqs-above-bandwidth-knee"),
    ("K13 the PUSH recipe's 0.94", "push", {}, "gpu-memory-utilization-capture-cliff"),
    ("K13 multimodal merely enabled at 0.94", "push", {},
     "gpu-memory-utilization-multimodal-traffic"),
    ("K13 images served at 0.92", "push",
     {"metrics.mm_items": 12, "flags.gpu_memory_utilization": 0.92},
     "gpu-memory-utilization-multimodal-traffic"),
    ("K14 MTP on an NVFP4 target measured 58%", "light",
     {**MTP_31B, **NVFP4_31B_EAGLE3}, "gemma4-mtp-on-int4-target"),
    ("K14 the seed-003 26B-A4B NVFP4 MTP recipe", "light", A4B_NVFP4_MTP,
     "gemma4-mtp-on-int4-target"),
    ("K15 parallel drafting off", "light", {}, "spec-parallel-drafting-vanilla-eagle3"),
    ("K16 DFlash on an H100", "light",
     {"model.speculative.method": "dflash", "model.speculative.model": "z-lab/dflash-8b"},
     "spec-dflash-on-ada"),
    ("K17 the PUSH recipe's 6.11x concurrency", "push", {}, "max-model-len-kv-cliff-edge"),
    ("K17 the LIGHT recipe's 32768 against the estimate", "light",
     {"metrics.kv_max_concurrency": None}, "max-model-len-above-kv-estimate"),
    ("K18 a restart that came with a version change", "light",
     {"vllm.restarted": True, "vllm.version_changed": True, "vllm.restarts": 1},
     "restart-without-config-change"),
    ("K19 the vetted template", "light", {}, "gemma4-chat-template-unvetted"),
    ("K19 an unknown template on a non-Gemma model", "plain", {"template.identity": "unknown"},
     "gemma4-chat-template-unvetted"),
    ("K20 a pin on the current AWQ head", "light", {"flags.revision": "6f1b616c0a1b"},
     "cyankiwi-revision-pin-squashed"),
    ("K20 a branch name is not a commit pin", "light", {"flags.revision": "main"},
     "cyankiwi-revision-pin-squashed"),
    ("K21 55% acceptance is healthy", "light", {}, "eagle-acceptance-random-prompt-band"),
    ("K22 128 sequences on GB10 is the last healthy point", "light",
     {**GB10, **A4B_NVFP4_MTP, "flags.max_num_seqs": 128},
     "gemma4-mtp-unified-memory-concurrency-ceiling"),
    ("K22 long prompts with a steadily high TTFT are not a collapse", "push",
     {"metrics.ttft_p50_s": 60.0, "metrics.requests_waiting": 20,
      "metrics.kv_cache_usage": 0.8, "metrics.lifetime.ttft_p50_s": 55.0},
     "serving-queue-collapse"),
    ("K23 TPOT near the baseline", "light",
     {**GB10, **NVFP4_31B_EAGLE3, "metrics.requests_running": 1, "metrics.tpot_p50_s": 0.07},
     "gemma4-31b-nvfp4-eagle3-single-stream-slow"),
    ("K23 40% acceptance is within reach of the 47% baseline", "light", spec_window(0.40),
     "gemma4-spec-acceptance-below-baseline"),
    ("K24 20% on the 26B-A4B EAGLE3 is above half its 33% baseline", "light",
     {"model.family": "gemma4-26b-a4b", **spec_window(0.20)},
     "gemma4-spec-acceptance-below-baseline"),
]


@pytest.mark.parametrize("preset,overrides,rule_id,severity",
                         [case[1:] for case in FIRES], ids=[case[0] for case in FIRES])
def test_the_rule_fires_where_it_applies(preset, overrides, rule_id, severity):
    if SEED_KB.rule(rule_id).predicts == "startup_failure":
        # A start-up failure is claimed for a server not seen serving (the presets serve).
        overrides = {"server.serving": False, **(overrides or {})}
    findings = fired(preset, overrides)
    assert rule_id in findings, sorted(findings)
    assert findings[rule_id].severity == severity
    assert not re.search(r"\{[a-z_]+(:[^}]*)?\}", findings[rule_id].message)  # all rendered
    assert "n/a" not in findings[rule_id].message  # missing values are worded, not blanked


@pytest.mark.parametrize("preset,overrides,rule_id",
                         [case[1:] for case in SILENT], ids=[case[0] for case in SILENT])
def test_the_rule_stays_silent_on_the_near_miss(preset, overrides, rule_id):
    assert rule_id not in fired(preset, overrides)


def test_every_checklist_item_k01_to_k24_has_a_rule_with_a_firing_test():
    covered = {k for rule in SEED_KB.rules for k in rule.checklist}
    tested = {SEED_KB.rule(case[3]).id for case in FIRES}
    assert {f"K{n:02d}" for n in range(1, 25)} <= covered
    for n in range(1, 25):
        item = f"K{n:02d}"
        assert any(item in SEED_KB.rule(r).checklist for r in tested), item


def test_every_seed_rule_cites_the_seed_and_says_what_to_do():
    for rule in SEED_KB.rules:
        assert any(ref.startswith("seed:") for ref in rule.references), rule.id
        assert len(rule.remediation) > 30 and rule.last_verified.year == 2026


def test_k05_evidence_shows_the_collapsed_window_next_to_the_healthy_lifetime():
    finding = fired("push", spec_window(0.12, lifetime=0.55))["eagle-tp-acceptance-collapse"]
    assert finding.evidence["rate"] == 0.12 and finding.evidence["lifetime_rate"] == 0.55
    assert "12%" in finding.message and "lifetime 55%" in finding.message


def test_k05_metrics_that_are_missing_are_reported_as_cannot_check():
    finding = fired("push", {"metrics.available": False})["eagle-tp-acceptance-collapse"]
    assert finding.severity == "info" and finding.evidence["cannot_check"] is True


def test_k09_message_says_upstream_reports_contradict_nightly_only():
    finding = fired("light", {**MTP_31B, "model.is_int4": False})[
        "gemma4-mtp-amplifies-turn-leak"]
    assert "nightly-only" in finding.message and "contradict" in finding.message


def test_k17_message_suggests_the_engine_figure_minus_five_percent():
    finding = fired("light", {"metrics.kv_max_concurrency": 1.02})[
        "max-model-len-kv-cliff-edge"]
    assert finding.evidence["suggested"] == int(32768 * 1.02 * 0.95)
    assert str(int(32768 * 1.02 * 0.95)) in finding.message


# ----------------------------------------------------------------------------- the recipes


def recipe_context(recipe: str, enable_thinking: bool, version: str = "0.25.1") -> dict:
    report = seed_report(recipe, version=version)
    report["servers"][0]["argv"] = recipe_argv(recipe, enable_thinking=enable_thinking)
    return build_contexts(json.loads(json.dumps(report)))[0]


RECIPES = [(r, t) for r in ("LIGHT", "PUSH") for t in (True, False)]


@pytest.mark.parametrize("recipe,thinking", RECIPES,
                         ids=[f"{r} with enable_thinking={t}" for r, t in RECIPES])
def test_the_seed_recipes_raise_nothing_above_medium(recipe, thinking):
    result = FULL_KB.evaluate(recipe_context(recipe, thinking))
    assert result.failures == []
    loud = [(f.rule_id, f.severity) for f in result
            if SEVERITY_RANK[f.severity] < SEVERITY_RANK["medium"]]
    assert loud == []


@pytest.mark.parametrize("recipe", ["LIGHT", "PUSH"])
def test_k12_k13_and_k17_stay_silent_on_the_recipes_own_values(recipe):
    ids = {f.rule_id for f in SEED_KB.evaluate(recipe_context(recipe, True))}
    quiet = {r.id for r in SEED_KB.rules if {"K12", "K13", "K17"} & set(r.checklist)}
    assert ids & quiet == set()


@pytest.mark.parametrize("recipe", ["LIGHT", "PUSH"])
def test_k03_k06_k07_are_advisories_on_the_recipes(recipe):
    # Checklist: advisories, i.e. low or info and worded as such (K03 was medium before).
    findings = {f.rule_id: f for f in SEED_KB.evaluate(recipe_context(recipe, True))}
    for rule_id in ("gemma4-forced-tool-choice-unenforced", "gemma4-thinking-tools-cot-dropped",
                    "gemma4-bare-tool-call-opener-dropped"):
        assert SEVERITY_RANK[findings[rule_id].severity] >= SEVERITY_RANK["low"], rule_id
        assert findings[rule_id].message.startswith("Advisory:"), rule_id


def test_the_push_recipe_on_0_26_0_is_a_risky_upgrade():
    findings = {f.rule_id: f for f in FULL_KB.evaluate(recipe_context("PUSH", True, "0.26.0"))}
    assert findings["gemma4-version-ceiling"].severity == "high"
    assert findings["gemma4-mrv2-kv-overreport-oom"].severity == "high"


def push_scrape(drafts: int, draft_tokens: int, accepted: int, scraped_at: str) -> dict:
    """A PUSH report whose /metrics carries spec-decode counters (V1 names)."""
    report = seed_report("PUSH", metrics=metrics_text(
        {"drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted,
         "per_pos": [accepted // 2, accepted // 3, accepted // 6]}, "0.25.1", "gemma"))
    report["collected_at"] = report["servers"][0]["metrics"]["scraped_at"] = scraped_at
    report["report_id"] = f"00000000-0000-4000-8000-{abs(hash(scraped_at)) % 10**12:012d}"
    return report


def test_a_collapsed_last_window_is_flagged_although_the_lifetime_looks_healthy():
    # Lifetime 17100/36000 = 47.5% (healthy); the last window accepted 600 of 6000 = 10%.
    first = push_scrape(10000, 30000, 16500, "2026-09-30T12:00:00+00:00")
    second = push_scrape(12000, 36000, 17100, "2026-09-30T12:05:00+00:00")
    ctx = build_contexts(second, [first])[0]
    finding = {f.rule_id: f for f in FULL_KB.evaluate(ctx)}["eagle-tp-acceptance-collapse"]
    assert finding.severity == "high"
    assert finding.evidence["rate"] == pytest.approx(0.10)
    assert finding.evidence["lifetime_rate"] == pytest.approx(0.475)
    assert finding.evidence["window"] == "delta"
    lifetime_only = {f.rule_id for f in FULL_KB.evaluate(build_contexts(second)[0])}
    assert "eagle-tp-acceptance-collapse" not in lifetime_only


def gb10_report(max_num_seqs: int, values: dict[str, Any]) -> dict:
    """Seed 003's host and recipe: 26B-A4B NVFP4 + MTP on a GB10, ctx 65536, util 0.85."""
    gpu = {"index": 0, "uuid": "GPU-gb10", "name": "NVIDIA GB10",
           "memory_total_bytes": 128 * 2**30, "memory_used_bytes": None,
           "compute_capability": "12.1", "utilization_gpu_pct": None, "temperature_c": None,
           "power_draw_w": None, "power_limit_w": None}
    argv = ["vllm", "serve", "nvidia/Gemma-4-26B-A4B-NVFP4", "--max-model-len", "65536",
            "--gpu-memory-utilization", "0.85", "--max-num-seqs", str(max_num_seqs),
            "--speculative-config", '{"method":"mtp","model":'
            '"google/gemma-4-26B-A4B-it-assistant","num_speculative_tokens":3}']
    report = report_skeleton("spark", [gpu])
    report["servers"].append(server_entry(argv, "0.25.1", gpu_uuids=["GPU-gb10"],
                                          metrics=metrics_text(values, "0.25.1", "g")))
    return report


# Seed 003 at c256: ~58% acceptance (0.77/0.57/0.41), queue far longer than the batch,
# memory at the ceiling (this exposition carries no TTFT histogram).
C256 = {"drafts": 10000, "draft_tokens": 30000, "accepted": 17400,
        "per_pos": [7700, 5700, 4100], "running": 256, "waiting": 700, "kv_cache_usage": 0.98}


def test_the_seed_003_collapse_is_found_in_a_real_report_without_blaming_the_drafter():
    findings = {f.rule_id: f for f in FULL_KB.evaluate(build_contexts(gb10_report(256, C256))[0])}
    assert findings["serving-queue-collapse"].severity == "high"
    assert findings["gemma4-mtp-unified-memory-concurrency-ceiling"].severity == "medium"
    for quiet in ("gemma4-mtp-on-int4-target", "gemma4-spec-acceptance-below-baseline"):
        assert quiet not in findings  # NVFP4 + MTP at 58% is the baseline itself (K14, K24)


def test_a_short_queue_without_a_ttft_histogram_is_reported_as_cannot_check():
    calm = {**C256, "running": 100, "waiting": 3, "kv_cache_usage": 0.6}
    findings = {f.rule_id: f for f in FULL_KB.evaluate(build_contexts(gb10_report(128, calm))[0])}
    assert findings["serving-queue-collapse"].severity == "info"
    assert findings["serving-queue-collapse"].evidence["missing"] == ["ttft"]
    assert "gemma4-mtp-unified-memory-concurrency-ceiling" not in findings


# ------------------------------------------------------------------- messages on real reports


def variant_context(recipe: str, version: str = "0.25.1", template: str = "vetted",
                    drop_kwargs: bool = False, extra: list[str] | None = None,
                    spec: str | None = None) -> dict:
    """Context of a seed recipe built from an agent report, with one thing changed."""
    report = seed_report(recipe, version=version, template=template)
    argv = report["servers"][0]["argv"]
    if drop_kwargs:
        del argv[-2:]
    if spec is not None:
        argv[argv.index("--speculative-config") + 1] = spec
    argv += extra or []
    return build_contexts(json.loads(json.dumps(report)))[0]


MTP_SPEC = '{"method":"mtp","model":"google/gemma-4-31B-it-assistant","num_speculative_tokens":3}'
VARIANTS = [
    ("LIGHT", {}), ("PUSH", {}), ("LIGHT", {"drop_kwargs": True}),
    ("LIGHT", {"drop_kwargs": True, "version": "0.23.0"}),
    ("LIGHT", {"drop_kwargs": True, "version": "0.25.0"}),
    ("PUSH", {"drop_kwargs": True, "version": "0.29.0"}), ("PUSH", {"version": "0.26.0"}),
    ("LIGHT", {"template": "frozen"}), ("LIGHT", {"template": "intermediate"}),
    ("LIGHT", {"spec": MTP_SPEC, "drop_kwargs": True}),
    ("LIGHT", {"extra": ["--max-num-seqs", "1024", "--attention-backend", "FLASH_ATTN"]}),
    ("PUSH", {"extra": ["--gpu-memory-utilization", "0.97"]}),
]


@pytest.mark.parametrize("recipe,change", VARIANTS,
                         ids=[f"{r} {sorted(c.items())}" for r, c in VARIANTS])
def test_seed_messages_render_real_values_without_placeholders_for_missing_data(recipe, change):
    result = SEED_KB.evaluate(variant_context(recipe, **change))
    assert result.failures == []
    for finding in result:
        if finding.evidence.get("cannot_check"):
            continue
        text = finding.message
        assert "n/a" not in text and "None" not in text, (finding.rule_id, text)
        assert not re.search(r"\d\.\d{5,}", text), (finding.rule_id, text)  # unrounded floats
        assert not re.search(r"\b(\w+) \1\b", text), (finding.rule_id, text)  # doubled words


def test_k01_says_where_the_server_upgraded_from_only_when_it_did():
    moved = fired("light", {"vllm.version": "0.26.0", "vllm.previous": "0.25.1",
                            "vllm.version_changed": True})["gemma4-version-ceiling"]
    fresh = fired("light", {"vllm.version": "0.26.0"})["gemma4-version-ceiling"]
    assert "moved here from 0.25.1" in moved.message
    assert "moved here" not in fresh.message and "risky upgrade" in fresh.message


def test_k23_single_stream_tpot_is_shown_in_milliseconds_against_the_68_ms_baseline():
    finding = fired("light", {**GB10, **NVFP4_31B_EAGLE3, "metrics.requests_running": 1,
                              "metrics.tpot_p50_s": 0.2034567})[
        "gemma4-31b-nvfp4-eagle3-single-stream-slow"]
    assert "203 ms" in finding.message and "68 ms" in finding.message
    assert "live acceptance 55%" in finding.message


def test_k23_per_position_acceptance_is_shown_as_whole_percentages():
    finding = fired("light", {**spec_window(0.15),
                              "metrics.spec_per_position": [0.2666666, 0.1333333, 0.05]})[
        "gemma4-spec-acceptance-below-baseline"]
    assert "[27, 13, 5]" in finding.message


def test_k22_collapse_without_a_ttft_histogram_says_so_instead_of_printing_a_blank():
    finding = fired("light", {"metrics.ttft_p50_s": None, "metrics.requests_waiting": 300,
                              "metrics.requests_running": 256, "metrics.kv_cache_usage": 0.98,
                              "metrics.generation_tps": 0.15})["serving-queue-collapse"]
    assert "TTFT not exposed" in finding.message and "KV usage 98%" in finding.message
    assert "generation 0.15 tok/s" in finding.message


def test_k18_names_the_knobs_with_their_values_or_says_they_are_defaults():
    finding = fired("plain", {"vllm.restarted": True, "vllm.restarted_without_change": True,
                              "vllm.restarts": 1})["restart-without-config-change"]
    assert "max_model_len (model default)" in finding.message
    assert "gpu_memory_utilization 0.92 and max_num_seqs 256" in finding.message
    assert "n/a" not in finding.message


def test_k05_advisory_asks_for_a_check_now_only_right_after_an_upgrade():
    upgraded = fired("push", {"vllm.version_changed": True, "vllm.previous": "0.24.0"})[
        "eagle-tp-drafter-mismatch-advisory"]
    steady = fired("push", {"vllm.previous": "0.25.1"})["eagle-tp-drafter-mismatch-advisory"]
    assert "just upgraded from 0.24.0" in upgraded.message
    assert "upgraded" not in steady.message and "check now" not in steady.message
