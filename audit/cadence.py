"""When a server's metric rules fall due: once per ``AUDIT_METRICS_INTERVAL_S``, at its host's
own phase of the interval.

Counting the interval from each server's last metric evaluation keeps hosts that came up
together (a fleet rolled out, a dashboard restored, a soak's warm-up) in step for ever:
every 5 minutes all of them fall due within the same report interval, the evaluation queue
fills in one wave and report-to-finding latency rises to a minute (the steady soak in
BENCHMARKS.md: queue 1,952 deep, p99 70 s, at 2,400 hosts). Here time is cut into periods
of the interval, shifted by a phase drawn from the host's id, and a server is due when a
report falls in a later period than its last metric evaluation: each host is still
evaluated once per interval (at most an interval and a report apart), but the fleet's due
evaluations are spread evenly over the interval. Only a host's first window after its first
evaluation is shorter than the interval.

The lane (``audit.lane``), the worker's nothing-due path (``audit.steady``) and its full path
(``audit.evaluation``) all decide with :func:`metrics_due` / :func:`next_due`, so the three
agree to the microsecond (integer arithmetic on microseconds since the epoch).
``AUDIT_METRICS_SPREAD`` false restores the plain interval from the last evaluation.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Knuth's multiplicative hash constant (2**32 / golden ratio): consecutive host ids land
#: far apart in the interval, so a fleet enrolled in one go is spread evenly.
_GOLDEN = 2654435761


def _spread() -> bool:
    return getattr(settings, "AUDIT_METRICS_SPREAD", True)


def phase_us(host_id: int, interval_s: int) -> int:
    """The host's offset into every period, in microseconds: ``0 <= phase < interval``."""
    return (int(host_id) * _GOLDEN) % (interval_s * 1_000_000)


def _period(at: datetime, host_id: int, interval_s: int) -> int:
    return ((at - _EPOCH) // _US - phase_us(host_id, interval_s)) // (interval_s * 1_000_000)


def metrics_due(last: datetime | None, at: datetime, host_id: int, interval_s: int) -> bool:
    """Are the metric rules of a server of host ``host_id`` due on a report collected ``at``,
    their last run having been on the report collected ``last`` (None: never)? Aware
    datetimes; ``interval_s`` is ``AUDIT_METRICS_INTERVAL_S`` (0: every report)."""
    if last is None:
        return True
    if interval_s <= 0 or not _spread():
        return at - last >= timedelta(seconds=max(interval_s, 0))
    return _period(at, host_id, interval_s) > _period(last, host_id, interval_s)


def next_due(last: datetime, host_id: int, interval_s: int) -> datetime:
    """The first ``collected_at`` at which :func:`metrics_due` turns true after a metric
    evaluation on the report collected ``last`` (an aware datetime)."""
    if interval_s <= 0 or not _spread():
        return last + timedelta(seconds=max(interval_s, 0))
    start_us = ((_period(last, host_id, interval_s) + 1) * interval_s * 1_000_000
                + phase_us(host_id, interval_s))
    return _EPOCH + start_us * _US
