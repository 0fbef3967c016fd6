"""A report dated in the future cannot freeze a host, through the real API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.models import Host, Report, Server

pytestmark = pytest.mark.django_db


def iso(ts: datetime) -> str:
    """RFC 3339 UTC with a Z, as the agent sends it."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_report_from_2099_is_refused_with_its_path(enrolled, post_report, make_report):
    _, token = enrolled()
    response = post_report(make_report(collected_at="2099-01-01T00:00:00Z"), token)
    assert response.status_code == 422
    assert [d["path"] for d in response.json()["details"]] == ["collected_at"]
    assert not Report.objects.exists()


def test_a_future_metrics_scrape_is_refused_too(enrolled, post_report, make_report):
    _, token = enrolled()
    scrape = {"format": "prometheus-text", "scraped_at": "2099-01-01T00:00:00Z", "text": ""}
    response = post_report(make_report(server={"metrics": scrape}), token)
    assert response.status_code == 422
    assert response.json()["details"][0]["path"] == "servers[0].metrics.scraped_at"


def test_clock_skew_within_the_setting_is_accepted(enrolled, post_report, make_report,
                                                   settings):
    _, token = enrolled()
    ahead = iso(datetime.now(UTC) + timedelta(minutes=2))
    assert post_report(make_report(collected_at=ahead), token).status_code == 202
    settings.COLLECTED_AT_MAX_AHEAD_S = 30
    ahead = iso(datetime.now(UTC) + timedelta(minutes=2))
    assert post_report(make_report(collected_at=ahead), token).status_code == 422


def test_a_future_time_stored_earlier_does_not_hide_newer_reports(enrolled, post_report,
                                                                  make_report):
    host, token = enrolled()
    future = datetime(2099, 1, 1, tzinfo=UTC)
    Host.objects.filter(pk=host.pk).update(last_collected_at=future, last_seen=future)
    report = make_report(host={"hostname": "renamed"}, server={"vllm_version": "0.26.0"})
    assert post_report(report, token).status_code == 202
    host.refresh_from_db()
    assert host.reported_hostname == "renamed" and host.last_collected_at < future
    assert host.seconds_since_seen() is not None and host.last_seen < future
    assert Server.objects.get().vllm_version == "0.26.0"


@pytest.mark.parametrize("collected_at", ["0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z"])
def test_a_report_from_the_far_past_is_refused_with_its_path(enrolled, post_report, make_report,
                                                             collected_at):
    _, token = enrolled()
    response = post_report(make_report(collected_at=collected_at), token)
    assert response.status_code == 422, response.content
    assert [d["path"] for d in response.json()["details"]] == ["collected_at"]
    assert "in the past" in response.json()["error"]
    assert not Report.objects.exists()


def test_a_spooled_report_from_last_month_is_still_accepted(enrolled, post_report,
                                                            make_report):
    _, token = enrolled()
    month_ago = iso(datetime.now(UTC) - timedelta(days=30))
    assert post_report(make_report(collected_at=month_ago), token).status_code == 202
