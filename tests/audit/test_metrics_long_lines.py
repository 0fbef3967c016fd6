"""A pathological /metrics line is skipped and named, the rest is read.

prometheus_client's label parser costs the square of an escaped label's length; the parser
hands it only lines up to ``MAX_LINE_CHARS``, so a 60 KiB line of ``\\"`` (within the ingest
cap) costs nothing and cannot hide the other samples.
"""

from __future__ import annotations

from audit.kb import metrics
from fleet_agent.schema import MAX_METRICS_LINE_CHARS


def test_an_escaped_quote_flood_is_skipped_and_the_other_samples_survive() -> None:
    flood = 'vllm:num_requests_running{model_name="' + '\\"' * 30_000 + '"} 9\n'
    assert len(flood) < MAX_METRICS_LINE_CHARS  # the dashboard accepts this report
    text = flood + 'vllm:num_requests_waiting{model_name="m"} 3\n'
    snap = metrics.parse(text)
    assert any("line 1 skipped" in e and "characters" in e for e in snap.errors)
    assert snap.gauges.get("requests_waiting") == 3
    assert "requests_running" not in snap.gauges
