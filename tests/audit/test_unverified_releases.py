"""A release past the knowledge base's verified range is never reported healthier.

The same server (seed recipes and every shared case), re-labelled 0.30.0 (verified) and
0.33.0 (not yet verified), must not lose findings at medium or above on 0.33.0: known issues
still open upstream keep open-ended ranges, and a Gemma 4 server gets a medium "not yet
checked" listing them.
"""

from __future__ import annotations

import copy

import pytest
from casekit import all_case_paths, case_id, case_to_report, seed_report

from audit.kb.context import build_contexts
from audit.kb.engine import SEVERITY_RANK, load_rules

AT_LEAST_MEDIUM = SEVERITY_RANK["medium"]
# Read from each release's own table (facts of its wheel, so verified on 0.33.0 too): a flag
# 0.30.0 refuses may be accepted again by 0.33.0 (--disable-log-requests, an inverse form).
FROM_RELEASE_TABLES = {"up-removed-flags", "vllm-flag-not-in-running-release",
                       "vllm-next-restart-rejects-flag"}


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _relabel(report: dict, version: str) -> dict:
    clone = copy.deepcopy(report)
    for server in clone["servers"]:
        server["vllm_version"] = server["installed_vllm_version"] = version
        server.pop("container_image", None)
    return clone


def _serious(kb, report: dict) -> list[set[str]]:
    return [{f.rule_id for f in kb.evaluate(ctx) if SEVERITY_RANK[f.severity] <= AT_LEAST_MEDIUM
             and f.rule_id not in FROM_RELEASE_TABLES} for ctx in build_contexts(report)]


def _reports() -> list[tuple[str, dict]]:
    found = [(f"seed {r}", seed_report(r)) for r in ("LIGHT", "PUSH")]
    found += [(f"case {case_id(p)}", case_to_report(p)) for p in all_case_paths()]
    return found


def _pin_batch_defaults(report: dict) -> dict:
    """The same server with 0.30.0's default batch limits written into argv: a release's own
    defaults may legitimately change what a configuration does (0.33.0 lowered GB10's
    max_num_seqs default from 1024 to 256), which is not knowledge going stale."""
    clone = _relabel(report, "0.30.0")
    for server, ctx in zip(clone["servers"], build_contexts(clone), strict=True):
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            value = ctx["flags"].get(key)
            if key not in ctx["flags_meta"]["set"] and isinstance(value, int):
                server["argv"] = [*server["argv"], "--" + key.replace("_", "-"), str(value)]
    return clone


@pytest.mark.parametrize(("name", "report"), _reports(), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_0_33_never_has_fewer_serious_findings_than_0_30(kb, name: str, report: dict) -> None:
    report = _pin_batch_defaults(report)
    verified = _serious(kb, _relabel(report, "0.30.0"))
    unverified = _serious(kb, _relabel(report, "0.33.0"))
    for before, after in zip(verified, unverified, strict=True):
        assert len(after) >= len(before), (name, sorted(before - after))


def test_a_gemma4_server_past_the_verified_range_keeps_its_highs_and_gets_the_list(kb) -> None:
    report = _relabel(seed_report("PUSH"), "0.33.0")
    findings = {f.rule_id: f for ctx in build_contexts(report) for f in kb.evaluate(ctx)}
    ceiling = findings["gemma4-version-ceiling"]
    assert ceiling.severity == "high"
    assert "Not yet verified on vLLM 0.33.0" in ceiling.message
    unchecked = findings["gemma4-unverified-release"]
    assert unchecked.severity == "medium"
    assert "#50477" in unchecked.message and "#50159" in unchecked.message
    on_030 = {f.rule_id for ctx in build_contexts(_relabel(seed_report("PUSH"), "0.30.0"))
              for f in kb.evaluate(ctx)}
    assert "gemma4-unverified-release" not in on_030
