"""The agent's compact /metrics form reads as the text does, for every capture we hold, and
the agent's family list is exactly what the dashboard's name tables read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.kb import metrics, metrics_names, vllm_tables
from fleet_agent.metrics_compact import FAMILIES, compact
from fleet_agent.schema import MetricsCompact

CAPTURES = sorted((Path(__file__).resolve().parents[2] / "demo" / "data" / "cases"
                   / "metrics").glob("*.prom"))


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def test_captures_are_there():
    assert len(CAPTURES) >= 10, "the /metrics captures under demo/data/cases/metrics are gone"


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name[:40])
def test_the_compact_form_gives_the_snapshot_the_text_gives(path):
    text = path.read_text()
    block = compact(text)
    MetricsCompact.model_validate(block)  # what the agent sends passes the contract
    from_text = metrics.parse(text).to_json()
    from_numbers = metrics.from_compact(json.loads(json.dumps(block))).to_json()
    assert from_numbers.pop("errors") == []
    from_text.pop("errors")
    assert from_numbers == from_text


def test_the_compact_form_is_a_fraction_of_the_text():
    text = max(CAPTURES, key=lambda p: p.stat().st_size).read_text()
    assert len(json.dumps(compact(text))) < len(text) / 4


def test_the_agents_family_list_is_what_the_dashboard_reads():
    read = {base for sources in (metrics_names.COUNTER_SOURCES, metrics_names.GAUGE_SOURCES,
                                 metrics_names.HISTOGRAM_SOURCES)
            for entries in sources.values() for base, _prio in entries}
    read |= {_family(n) for n in metrics_names.LABELLED}
    read |= {metrics_names.PER_POSITION_BASE, *metrics_names.INFO_NAMES}
    read |= {_family(n) for n in metrics_names.V0_ONLY | metrics_names.V1_ONLY}  # era hints
    assert set(FAMILIES) == read


def test_every_family_sent_is_one_some_vllm_release_exports():
    exported = set()
    for release in vllm_tables.releases():
        for name in vllm_tables.table(release).get("metrics") or {}:
            exported.add(name.split()[0])
    # V0's Info family is exposed as vllm:cache_config_info (vllm-facts.md 1.3); V0-only era
    # hints may predate the oldest table (the V0 logging gauges went before 0.8.5).
    v0_hints = {_family(n) for n in metrics_names.V0_ONLY}
    unknown = {f for f in FAMILIES if f not in exported} - {"vllm:cache_config"} - v0_hints
    assert not unknown, f"families no release table lists: {sorted(unknown)}"


def test_a_body_without_mapped_vllm_families_keeps_its_era():
    text = 'vllm:some_new_family{engine="0"} 1\nprocess_cpu_seconds_total 3\n'
    assert metrics.from_compact(compact(text)).era == metrics.parse(text).era == "v1"
    text = "vllm:some_new_family 1\n"
    assert metrics.from_compact(compact(text)).era == metrics.parse(text).era == "v0"
    assert metrics.from_compact(compact("python_info 1\n")).era == "unknown"


def test_bad_bucket_bounds_are_left_out_and_said_on_every_report():
    """A bound that is no number or NaN is dropped with an error, a repeated bound counts once
    (its last count), and the second report with the same bounds says so again: the parsed
    bounds are reused between reports, their errors are not swallowed."""
    block = {"histograms": {"vllm:time_to_first_token_seconds": [{
        "labels": {"engine": "0", "model_name": "m"},
        "le": ["0.1", "x", "NaN", "0.1", "+Inf"], "counts": [1, 2, 3, 4, 9, 99],
        "sum": 1.5, "count": 9}]}}
    for _ in range(2):
        snap = metrics.from_compact(json.loads(json.dumps(block)))
        assert snap.histograms["ttft"].buckets == [(0.1, 4.0), (float("inf"), 9.0)]
        assert snap.errors == [
            "vllm:time_to_first_token_seconds_bucket without a numeric le label, ignored",
            "vllm:time_to_first_token_seconds_bucket with le=NaN, ignored"]
