"""Rules that read the per-release tables: options a release refuses, the next restart."""

from __future__ import annotations

import pytest

from audit.kb.context import build_context
from audit.kb.engine import load_rules

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984,
        "compute_capability": "9.0", "uuid": "GPU-0"}


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _findings(kb, argv: list[str], version: str, installed: str | None = None) -> dict:
    server = {"pid": 7, "base_url": "http://127.0.0.1:8000", "vllm_version": version,
              "installed_vllm_version": installed or version, "argv": argv}
    report = {"host": {"hostname": "h"}, "gpus": [H100], "servers": [server]}
    return {f.rule_id: f for f in kb.evaluate(build_context(server, report))}


def test_an_installed_release_that_dropped_a_flag_fails_the_next_restart(kb) -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--enable-reasoning",
            "--reasoning-parser", "deepseek_r1"]
    found = _findings(kb, argv, "0.9.2", installed="0.11.0")
    finding = found["vllm-next-restart-rejects-flag"]
    assert finding.severity == "high"
    assert "--enable-reasoning (removed in 0.10.0)" in finding.message
    assert "vllm-next-restart-rejects-flag" not in _findings(kb, argv, "0.9.2")


def test_no_restart_finding_for_a_flag_the_installed_release_still_has(kb) -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--disable-log-requests"]
    for installed in ("0.11.0", "0.15.1", "0.33.0"):
        found = _findings(kb, argv, "0.9.2", installed=installed)
        assert "vllm-next-restart-rejects-flag" not in found, installed
        assert "up-removed-flags" not in found


def test_a_flag_newer_than_the_running_release_is_a_finding(kb) -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--disable-prefix-caching"]
    found = _findings(kb, argv, "0.30.0")
    assert found["vllm-flag-not-in-running-release"].severity == "medium"
    assert "--disable-prefix-caching (first in 0.33.0)" in \
        found["vllm-flag-not-in-running-release"].message
    assert "vllm-flag-not-in-running-release" not in _findings(kb, argv, "0.33.0")


def test_a_removed_flag_on_the_running_release_is_still_high(kb) -> None:
    found = _findings(kb, ["vllm", "serve", "Qwen/Qwen3-8B", "--num-scheduler-steps", "8"],
                      "0.15.1")
    assert found["up-removed-flags"].severity == "high"


def test_a_deprecated_option_is_a_low_finding_before_it_is_removed(kb) -> None:
    argv = ["vllm", "serve", "Qwen/Qwen3-8B", "--disable-log-requests"]
    found = _findings(kb, argv, "0.15.1")  # deprecated there, gone in 0.19.1
    assert found["vllm-deprecated-options"].severity == "low"
    assert "--disable-log-requests" in found["vllm-deprecated-options"].message
    assert "vllm-deprecated-options" not in _findings(kb, argv, "0.9.2")
