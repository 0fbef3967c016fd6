"""Weights per GPU under expert parallelism (demo case 031: Qwen3-Coder-480B-A35B-FP8 on 8x H20
with ``-dp=8 --enable-expert-parallel``). With EP the routed experts shard over TP x DP ranks;
a false CRITICAL "447 GiB of weights per GPU" told the operator a loading server cannot load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from audit.kb.engine import load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from casekit import evaluate_case  # noqa: E402

from demo.paths import reports_dir  # noqa: E402

CASE_031 = next(reports_dir().glob("031-*.json"))


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def _case_with_argv(tmp_path: Path, drop: set[str]) -> Path:
    case = json.loads(CASE_031.read_text())
    case["argv"] = [a for a in case["argv"] if a not in drop]
    path = tmp_path / CASE_031.name
    path.write_text(json.dumps(case))
    return path


def test_expert_parallel_moe_over_dp8_fits_and_keeps_the_kv_diagnosis(kb):
    fired, failures = evaluate_case(kb, CASE_031)
    assert not failures
    assert "mf-weights-do-not-fit" not in fired
    assert fired["up-max-model-len-default-exceeds-kv"].severity == "high"


def test_without_expert_parallel_every_dp_rank_holds_all_weights(kb, tmp_path):
    # Near miss: DP alone replicates the whole model on each GPU; 480 GB FP8 > 96 GiB x 0.9.
    fired, _ = evaluate_case(kb, _case_with_argv(tmp_path, {"--enable-expert-parallel"}))
    finding = fired["mf-weights-do-not-fit"]
    assert finding.severity == "critical"
    assert finding.evidence["weights_gib"] > 400
