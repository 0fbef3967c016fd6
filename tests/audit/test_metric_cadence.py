"""When metric rules fall due (audit.cadence): once per ``AUDIT_METRICS_INTERVAL_S`` on each
host's own phase of it, so a fleet whose hosts came up in the same minute is not evaluated
in one wave every interval."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from audit import cadence

_TIMES = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1),
                      timezones=st.just(UTC))


@given(host=st.integers(min_value=1, max_value=10**12), last=_TIMES,
       gap_us=st.integers(min_value=-10**9, max_value=4 * 3600 * 10**6),
       interval=st.sampled_from([1, 30, 90, 300, 3600]))
def test_due_from_the_next_due_time_on_and_within_one_interval(host, last, gap_us, interval):
    at = last + timedelta(microseconds=gap_us)
    with override_settings(AUDIT_METRICS_SPREAD=True):
        due_at = cadence.next_due(last, host, interval)
        assert last < due_at <= last + timedelta(seconds=interval)
        assert cadence.metrics_due(last, at, host, interval) == (at >= due_at)
        assert cadence.metrics_due(None, at, host, interval)


def test_a_fleet_that_came_up_together_falls_due_spread_over_the_interval():
    """10,000 hosts evaluated in the same second: their next metric evaluations are spread
    evenly over the next 5 minutes (no 30 s slot holds twice its share), not all due in the
    same report interval."""
    evaluated = datetime(2026, 12, 7, 11, 0, 0, tzinfo=UTC)
    with override_settings(AUDIT_METRICS_SPREAD=True):
        due = [cadence.next_due(evaluated, host, 300) for host in range(1, 10_001)]
    slots = Counter(int((when - evaluated).total_seconds() // 30) for when in due)
    assert sorted(slots) == list(range(10))
    assert max(slots.values()) < 2 * 10_000 / 10


def test_without_the_spread_the_interval_counts_from_the_last_evaluation():
    last = datetime(2026, 12, 7, 11, 0, 7, tzinfo=UTC)
    with override_settings(AUDIT_METRICS_SPREAD=False):
        assert cadence.next_due(last, 42, 300) == last + timedelta(seconds=300)
        assert not cadence.metrics_due(last, last + timedelta(seconds=299), 42, 300)
        assert cadence.metrics_due(last, last + timedelta(seconds=300), 42, 300)
    assert cadence.metrics_due(last, last, 42, 0)  # interval 0: every report
