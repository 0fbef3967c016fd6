"""vLLM 0.9.1 lowers an explicit --max-model-len to the tokenizer's model_max_length without a
word (vllm-0.9.1 vllm/config.py ModelConfig.get_and_verify_max_len, vLLM PR #19201; fixed in
0.9.2 by PR #19660). Every report is built here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hostfinding import finding

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import serve  # noqa: E402

RULE = "known-max-model-len-capped-by-tokenizer-0-9-1"
MODEL = "OpenGVLab/InternVL3-14B"


def _finding(version: str, *flags: str, served_len: int | None = None):
    # served_len: what GET /v1/models answered on the running server
    models = None if served_len is None else [{"id": MODEL, "max_model_len": served_len}]
    return finding(RULE, "NVIDIA A100-SXM4-80GB", serve(MODEL, *flags), version,
                   models=models)


def test_explicit_length_on_0_9_1_names_the_silent_cap_and_the_fix() -> None:
    found = _finding("0.9.1", "--max-model-len", "32768")
    assert found is not None and found.severity == "medium"
    assert "32768" in found.message and "tokenizer_config.json" in found.message
    assert "0.9.2" in found.remediation


def test_the_engine_reporting_less_than_asked_confirms_it() -> None:
    found = _finding("0.9.1", "--max-model-len", "32768", served_len=12288)
    assert found is not None and found.severity == "high"
    assert "12288" in found.message


@pytest.mark.parametrize(("version", "flags", "served"), [
    ("0.9.1", ("--max-model-len", "32768"), 32768),   # the engine serves what was asked
    ("0.9.2", ("--max-model-len", "32768"), None),    # the fix: refused at start instead
    ("0.9.0.1", ("--max-model-len", "32768"), None),  # before the tokenizer step existed
    ("0.9.1", (), None),                              # no explicit length to lower
])
def test_quiet_where_the_requested_length_is_served_or_cannot_be_lowered(
        version, flags, served) -> None:
    assert _finding(version, *flags, served_len=served) is None
