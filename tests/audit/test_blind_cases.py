"""The knowledge base on fresh public vLLM reports it was not built from
(tests/audit/blind_cases/*.json, README there for the measured recall).

Part 1: each report whose root cause the knowledge base finds keeps finding it, through a
config/metrics rule at an acting severity or through the log signature that matches the
error line the report quotes (``error_lines`` -> ``failed_starts[]``, see casekit); the
near miss 319 (a benign warning) stays quiet. Part 2: each report's nearest silent neighbour
(the other GPU, PP 1, a healthy acceptance, the release that fixed it) leaves the rule silent.
Part 3: the general fixes behind the new findings (version strings of untagged source builds,
GPU rows) on their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.kb.engine import SEVERITY_RANK, load_rules
from audit.kb.gpus import lookup
from audit.kb.versions import parse_version

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402
from ctxfactory import make_context  # noqa: E402

BLIND = Path(__file__).resolve().parent / "blind_cases"

# Case prefix -> (rules that must fire, minimum severity). Comments give the diagnosis.
FOUND: dict[str, tuple[tuple[str, ...], str]] = {
    # #57475: --gpu-memory-utilization 0.98 on a 24 GB GPU, OOM in CUDA-graph capture.
    "301": (("gpu-memory-utilization-capture-cliff",), "high"),
    # #31480: DeepSeek-V3.2 (sparse MLA) on sm120.
    "302": (("upx-dsa-sparse-mla-unsupported-gpu",), "high"),
    # #55605: GLM-5.3 MTP k=5 accepting 8.85 % of drafts.
    "303": (("upb-spec-decode-low-acceptance-deep-k",), "high"),
    # #32213: glm47 parser drops zero-argument tool calls.
    "306": (("upx-glm47-parser-zero-arg-tool-calls",), "medium"),
    # #40802: DeepSeek V4 on 2x RTX 5090 from an untagged source build (0.1.devN).
    "312": (("upx-dsa-sparse-mla-unsupported-gpu",), "high"),
    # #36643: Qwen3.5 with PP 4 and MTP.
    "320": (("upb-pipeline-parallel-hybrid-model", "upx-pipeline-parallel-speculative"), "high"),
    # #45455: MiniMax-M3 with PP 7 before PR #45810.
    "321": (("upb-pipeline-parallel-unsupported-architecture",), "critical"),
    # #52761: DeepSeek V4 with PP 3 on A100 (no PP, and no sparse-MLA kernels on sm80).
    "322": (("upb-pipeline-parallel-unsupported-architecture",
             "upx-dsa-sparse-mla-unsupported-gpu"), "high"),
    # #19222: deepseek_r1 reasoning parser on Qwen3 with enable_thinking false.
    "323": (("upx-qwen3-deepseek-r1-reasoning-parser",), "medium"),
    # #37972: Qwen3.5 FP8 split in 8 pipeline stages.
    "324": (("upb-pipeline-parallel-hybrid-model",), "high"),
    # #27409: granite-4.0-h (hybrid Mamba) with PP 2.
    "325": (("upb-pipeline-parallel-hybrid-model",), "high"),
}

# Case prefix -> rules whose log signatures must match the error line the report quotes.
LOGS: dict[str, tuple[str, ...]] = {
    "301": ("gpu-memory-utilization-capture-cliff",),
    "313": ("up-sm12x-build-without-kernels",),
    "321": ("upb-pipeline-parallel-unsupported-architecture",),
    "322": ("upb-pipeline-parallel-unsupported-architecture",),
}

QUIET = ("319",)  # #12656: the FA2 head-size-72 fallback warning is benign

H200 = [{"name": "NVIDIA H200", "memory_gib": 141, "count": 2}]

# Case prefix -> [(what changed, mutation, rules that must stay silent)]: the nearest
# neighbour of the report. Mutation keys as in mined_cases.py, plus ``metrics_values``.
PP1 = {"argv_set": {"--pipeline-parallel-size": "1"}}
SPEC = "upb-spec-decode-low-acceptance-deep-k"
DSA = "upx-dsa-sparse-mla-unsupported-gpu"
PP_HYBRID = "upb-pipeline-parallel-hybrid-model"
PP_ARCH = "upb-pipeline-parallel-unsupported-architecture"
NEAR: dict[str, list[tuple[str, dict[str, Any], tuple[str, ...]]]] = {
    "303": [("healthy acceptance", {"metrics_values": {
                "drafts": 1000, "draft_tokens": 5000, "accepted": 2600, "per_pos": [800]}},
             (SPEC,)),
            ("one speculative token", {"argv_set": {
                "--speculative-config.num_speculative_tokens": "1"}}, (SPEC,))],
    "312": [("Hopper", {"gpus": H200}, (DSA,))],
    "320": [("no pipeline parallelism", PP1, (PP_HYBRID,))],
    "321": [("release with PP support", {"vllm_version": "0.24.0"}, (PP_ARCH,)),
            ("no pipeline parallelism", PP1, (PP_ARCH,))],
    "322": [("no pipeline parallelism", PP1, (PP_ARCH,))],
    "324": [("no pipeline parallelism", PP1, (PP_HYBRID,))],
    "325": [("dense model", {"argv_replace": {"ibm-granite/granite-4.0-h-tiny":
                                              "ibm-granite/granite-3.3-8b-instruct"}},
             (PP_HYBRID,)),
            ("no pipeline parallelism", PP1, (PP_HYBRID,))],
}


@pytest.fixture(scope="module")
def kb():
    """The whole knowledge base, as the product loads it."""
    return load_rules()


def _path(prefix: str) -> Path:
    found = sorted(BLIND.glob(f"{prefix}-*.json"))
    assert len(found) == 1, f"case {prefix}: expected one file, found {found}"
    return found[0]


def _mutate(case: dict[str, Any], mutation: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(case))
    for key in ("vllm_version", "gpus", "env", "metrics_values"):
        if key in mutation:
            out[key] = mutation[key]
    replace = mutation.get("argv_replace") or {}
    for old in replace:
        assert old in out["argv"], f"near miss replaces {old!r}, not in the case argv"
    out["argv"] = [replace.get(tok, tok) for tok in out["argv"]]
    for flag, value in (mutation.get("argv_set") or {}).items():
        assert flag in out["argv"], f"near miss sets {flag!r}, not in the case argv"
        out["argv"][out["argv"].index(flag) + 1] = value
    return out


# ----------------------------------------------------------------------------- part 1

def test_every_blind_case_has_the_case_fields_and_repeats_no_other_case():
    """Freshness against rules was checked when the reports were collected (README); what must
    hold from now on is that no blind case duplicates a case of the other sets."""
    fields = {"source_url", "vllm_version", "gpus", "argv", "env", "symptom", "root_cause",
              "fixed_in", "expected_finding", "confidence"}
    paths = sorted(BLIND.glob("*.json"))
    assert len(paths) >= 25
    here = Path(__file__).resolve().parent
    others = {json.loads(p.read_text())["source_url"]
              for folder in ("more_cases", "model_cases") for p in (here / folder).glob("*.json")}
    others |= {json.loads(p.read_text())["source_url"] for p in casekit.all_case_paths()}
    for path in paths:
        case = json.loads(path.read_text(encoding="utf-8"))
        assert fields <= set(case), f"{path.name} lacks {sorted(fields - set(case))}"
        assert case["source_url"].startswith("https://github.com/vllm-project/vllm/issues/")
        assert case["source_url"] not in others, f"{path.name} repeats another case"


@pytest.mark.parametrize("prefix", sorted(FOUND))
def test_the_report_root_cause_is_found_at_an_acting_severity(kb, prefix):
    fired, failures = casekit.evaluate_case(kb, _path(prefix))
    assert not failures, failures
    expected, minimum = FOUND[prefix]
    summary = sorted((rule_id, f.severity) for rule_id, f in fired.items())
    for rule_id in expected:
        assert rule_id in fired, f"{prefix}: expected {rule_id}; fired {summary}"
        assert casekit.at_least(fired[rule_id].severity, minimum), (prefix, rule_id)
        assert fired[rule_id].references and fired[rule_id].message


@pytest.mark.parametrize("prefix", sorted(LOGS))
def test_the_quoted_error_line_matches_the_rule_that_explains_it(kb, prefix):
    matched = casekit.log_matches(kb, _path(prefix))
    for rule_id in LOGS[prefix]:
        assert rule_id in matched, f"{prefix}: {rule_id} not matched; got {sorted(matched)}"


@pytest.mark.parametrize("prefix", QUIET)
def test_a_benign_report_raises_nothing_an_operator_must_act_on(kb, prefix):
    fired, failures = casekit.evaluate_case(kb, _path(prefix))
    assert not failures
    loud = [(rid, f.severity) for rid, f in fired.items()
            if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["low"]]
    assert loud == []


# ----------------------------------------------------------------------------- part 2

NEAR_ITEMS = [(p, what, m, silent) for p, items in NEAR.items() for what, m, silent in items]


@pytest.mark.parametrize(("prefix", "what", "mutation", "silent"), NEAR_ITEMS,
                         ids=[f"{p}-{w}" for p, w, _, _ in NEAR_ITEMS])
def test_the_rule_stays_silent_on_the_near_miss_of_its_report(kb, tmp_path, prefix, what,
                                                               mutation, silent):
    path = _path(prefix)
    variant = tmp_path / path.name
    variant.write_text(json.dumps(_mutate(json.loads(path.read_text()), mutation)))
    fired, failures = casekit.evaluate_case(kb, variant)
    assert not failures, failures
    loud = [rule_id for rule_id in silent if rule_id in fired]
    assert not loud, f"{prefix} ({what}): {loud} fired: {fired[loud[0]].message}"


_L40S = make_context("plain")["gpu"]  # the preset's GPU (ctxfactory has no vendor key)
KV_SCENARIOS = [
    ({"flags.kv_cache_dtype": "fp8_ds_mla"}, "high"),             # dense Llama-class model
    # fp8_inc is a Gaudi-only value: loud on an NVIDIA GPU, quiet on a Gaudi.
    ({"flags.kv_cache_dtype": "fp8_inc", "gpu": {**_L40S, "vendor": "nvidia"}}, "high"),
    ({"flags.kv_cache_dtype": "fp8_inc", "gpu": {**_L40S, "vendor": "intel"}}, None),
    ({"flags.kv_cache_dtype": "fp8"}, None),
    ({"flags.kv_cache_dtype": "auto"}, None),
    ({"flags.kv_cache_dtype": "fp8_ds_mla", "model.id": "deepseek-ai/DeepSeek-V3.2",
      "model.family": "deepseek"}, None),                          # the model it exists for
    ({"flags.kv_cache_dtype": "fp8_ds_mla", "model.arch.is_sparse_mla": True}, None),
]


@pytest.mark.parametrize(("overrides", "expected"), KV_SCENARIOS,
                         ids=[f"{o['flags.kv_cache_dtype']}-{i}" for i, (o, _)
                              in enumerate(KV_SCENARIOS)])
def test_kv_cache_dtype_for_another_model_or_hardware(kb, overrides, expected):
    """#42587: fp8_ds_mla (DeepSeek sparse MLA only) and fp8_inc (Intel Gaudi only) crash the
    engine elsewhere; the ordinary fp8 and auto values and the DSA model stay quiet."""
    mine = [f for f in kb.evaluate(make_context("plain", overrides))
            if f.rule_id == "upb-kv-cache-dtype-wrong-model-or-hardware"]
    if expected is None:
        assert not mine, mine[0].message
    else:
        assert mine and mine[0].severity == expected


@pytest.mark.parametrize("preset", ["light", "push", "plain"])
def test_the_seed_recipes_raise_no_blind_finding(kb, preset):
    loud = [f.rule_id for f in kb.evaluate(make_context(preset)) if f.rule_id.startswith("upb-")]
    assert loud == []


# ----------------------------------------------------------------------------- part 3

@pytest.mark.parametrize("raw", ["0.1.dev15830+g8d599d76a", "0.1.dev1+g6997a25ac.d20250904"])
def test_an_untagged_source_build_has_an_unknown_version(raw):
    """setuptools-scm's fallback for a checkout without tags is no release: ranges must not
    read it as 0.1 (which silenced every ">= 0.11" rule on the DeepSeek V4 preview image)."""
    info = parse_version(raw)
    assert info.version is None and info.is_prerelease
    assert "without release tags" in info.note


def test_real_early_releases_and_dev_builds_keep_their_version():
    assert parse_version("0.1.7").version == "0.1.7"
    assert parse_version("0.29.1rc1.dev339+gda9888462").version == "0.29.1rc1.dev339"


@pytest.mark.parametrize(("name", "cc", "vendor"), [
    ("NVIDIA B300 SXM6 AC", "10.3", None), ("AMD Instinct MI355X", None, "amd"),
    ("NVIDIA B200", "10.0", None)])
def test_blackwell_ultra_and_cdna4_gpus_are_known(name, cc, vendor):
    row = lookup(name)
    assert row is not None and row.get("cc") == cc and row.get("vendor") == vendor


@pytest.mark.parametrize(("rule_id", "quoted"), [
    # vllm#40008 (title): MXFP4 MoE on MI355 with AITER.
    ("upb-rocm-aiter-moe-kernel-config", "Unsupported kernel config for moe heuristic dispatch"),
    # vllm#52761 (title): DeepSeek V4 with PP 3.
    ("upb-pipeline-parallel-unsupported-architecture",
     "Pipeline parallelism is not supported for this model."),
])
def test_an_error_text_quoted_upstream_matches_inside_a_worker_log_line(kb, rule_id, quoted):
    """The reports quote the error text only; a worker logs it after its own prefix (the
    prefix here is illustrative). Only the explaining rule matches, and a healthy ROCm start
    matches nothing."""
    line = f"(Worker_TP0 pid=7) ERROR 05-25 14:43:10 [multiproc_executor.py:863] {quoted}"
    matched = {rule.id for rule, _ in kb.match_log(["INFO Starting to load model", line])}
    assert matched == {rule_id}
    assert kb.match_log(["INFO [rocm.py:1] Using AITER fused MoE", "INFO Graph capturing"]) == []
