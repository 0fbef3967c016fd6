"""The live-metrics reader on a real vLLM 0.32.0 /metrics scraped under load (six streaming
requests at once, recorded by tests/real_vllm: tests/data/real_vllm/0.32.0/
metrics_under_load.txt)."""

from __future__ import annotations

from pathlib import Path

from audit.kb.metrics import parse
from audit.kb.vllm_tables import table

SCRAPE = Path(__file__).resolve().parents[1] / "data" / "real_vllm" / "0.32.0" / \
    "metrics_under_load.txt"


def test_real_scrape_under_load_reads_as_v1_with_the_load_on_it() -> None:
    snap = parse(SCRAPE.read_text())
    assert snap.errors == []
    assert snap.era == "v1"
    assert snap.model_names == ["tiny"]
    assert snap.gauges["requests_running"] >= 2
    assert snap.gauges["requests_waiting"] == 0
    assert 0 < snap.gauges["kv_cache_usage"] < 1
    assert snap.counters["prompt_tokens"] > 0
    assert snap.cache_config["block_size"] == "128"  # the CPU backend's block size
    assert {"ttft", "itl", "e2e", "queue_time"} <= snap.present


def test_every_family_of_the_real_scrape_is_in_the_release_table() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    names = {f.name for f in text_string_to_metric_families(SCRAPE.read_text())
             if f.name.startswith("vllm:")}
    families = {n.removesuffix("_created") if n.endswith("_created") and n[:-8] in names
                else n for n in names}
    assert families - set(table("0.32.0")["metrics"]) == set()
