"""Timestamps with any RFC 3339 offset are stored in UTC; none makes the API answer 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet.models import Report

pytestmark = pytest.mark.django_db


def test_a_far_offset_that_postgresql_would_refuse_is_stored_as_utc(enrolled, post_report,
                                                                     make_report):
    _, token = enrolled()
    report = make_report(collected_at="2026-11-29T08:00:00+21:12",
                         server={"started_at": "2026-11-29T07:00:00-18:30"})

    assert post_report(report, token).status_code == 202
    stored = Report.objects.get(report_id=report["report_id"])
    assert stored.collected_at == datetime(2026, 11, 28, 10, 48, tzinfo=UTC)


def test_a_timestamp_out_of_range_in_utc_is_refused_with_its_path(enrolled, post_report,
                                                                  make_report):
    _, token = enrolled()
    report = make_report(collected_at="0001-01-01T00:00:00+01:00")

    response = post_report(report, token)
    assert response.status_code == 422
    assert "collected_at" in [d["path"] for d in response.json()["details"]]
    assert not Report.objects.exists()
