"""When the dashboard asks an agent for its raw ``/metrics`` text (``metrics_text`` in the
report's 202 answer; docs/wire-contract.md, "compact /metrics form").

Newer agents send the families the dashboard reads as numbers and the text only now and
then. ``FLEET_METRICS_TEXT_EVERY_S`` lets the dashboard set that rate for the whole fleet:
each host is asked once per period, at an offset of its own (from its machine id), so the
texts of a large fleet spread over the period instead of arriving together. Decided from
the report alone: no query, no state, nothing added to ingest but a hash.
"""

from __future__ import annotations

import zlib

from django.conf import settings

from fleet_agent.schema import Report as WireReport


def text_due(wire: WireReport) -> bool:
    """True when this report's collection window ``(collected_at - interval_s,
    collected_at]`` holds the host's moment of the period and a server sent the compact form
    without its text; False when ``FLEET_METRICS_TEXT_EVERY_S`` is 0 (the default)."""
    every = settings.FLEET_METRICS_TEXT_EVERY_S
    if every <= 0 or not any(s.metrics is not None and s.metrics.compact is not None
                             and not s.metrics.text for s in wire.servers):
        return False
    offset = zlib.crc32(wire.host.machine_id.encode("utf-8")) % every
    end = wire.collected_at.timestamp() - offset
    start = end - wire.agent.interval_s
    return int(end // every) != int(start // every)
