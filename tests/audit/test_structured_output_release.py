"""Structured output as a release fact: tool_choice "required" with the xgrammar backend forced
on vLLM 0.8.3-0.8.5 (V1 refuses the minItems schema it builds; fixed in 0.9.0). Every report
is built here; near misses stay quiet."""

from __future__ import annotations

from hostfinding import finding

RULE = "known-xgrammar-tool-choice-required-min-items-0-8"
TOOLS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def _finding(extra: list[str], version: str, env: dict | None = None):
    argv = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", *extra]
    return finding(RULE, "NVIDIA L40S", argv, version, env=env)


def test_forced_xgrammar_with_tool_calls_on_0_8_4_warns_of_required_tool_choice() -> None:
    found = _finding([*TOOLS, "--guided-decoding-backend", "xgrammar"], "0.8.4")
    assert found is not None and found.severity == "medium"
    assert "minItems" in found.message and "0.9.0" in found.remediation


def test_an_xgrammar_option_suffix_is_still_xgrammar() -> None:
    extra = [*TOOLS, "--guided-decoding-backend", "xgrammar:disable-any-whitespace"]
    assert _finding(extra, "0.8.5") is not None


def test_near_misses_stay_quiet() -> None:
    forced = [*TOOLS, "--guided-decoding-backend", "xgrammar"]
    assert _finding(forced, "0.9.0") is None          # fixed by PR 17845
    assert _finding(forced, "0.8.2") is None          # no tool_choice "required" yet
    assert _finding(TOOLS, "0.8.4") is None           # backend left to vLLM
    assert _finding(["--guided-decoding-backend", "xgrammar"], "0.8.4") is None  # no tools
    assert _finding([*TOOLS, "--guided-decoding-backend", "guidance"], "0.8.4") is None
    assert _finding(forced, "0.8.4", env={"VLLM_USE_V1": "0"}) is None  # V0 falls back
