"""A compact ``/metrics`` block as the same process exposes it later: for the tests that
send a host's successive scrapes (``fleet_agent.metrics_compact`` shape)."""

from __future__ import annotations

import copy
from typing import Any


def grown(block: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of ``block`` with every sample value and histogram bucket, sum and count
    ``factor`` times larger (counters grow between scrapes; gauges move too)."""
    block = copy.deepcopy(block)
    for series in block["samples"].values():
        for pair in series:
            pair[1] *= factor
    for rows in block["histograms"].values():
        for row in rows:
            row["counts"] = [count * factor for count in row["counts"]]
            for key in ("sum", "count"):
                if row[key] is not None:
                    row[key] *= factor
    return block
