"""A host's identity is the name it enrolled with; a report cannot speak for another host.

A token's report naming another machine (``host.hostname: "gpu-node-01"``) once renamed the
host on every page, metric and alert. Now the enrolled name (an admin may rename it) stays
the identity; the report's differing hostname is recorded as such and shown on the host
page; a hostname with CR/LF/ESC is refused at ingest like at enrollment.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.alerts import _silent_item
from fleet.models import Host, Report

pytestmark = pytest.mark.django_db


def test_a_reports_other_hostname_is_recorded_never_taken_over(enrolled, post_report,
                                                               make_report, client,
                                                               admin_user) -> None:
    host, token = enrolled(hostname="gpu-node-07")
    response = post_report(make_report(host={"hostname": "gpu-node-01"}), token)
    assert response.status_code == 202, response.content
    host = Host.objects.get(pk=host.pk)
    assert (host.hostname, host.reported_hostname) == ("gpu-node-07", "gpu-node-01")
    item = _silent_item(host, timezone.now() + timedelta(hours=1))
    assert item.host == "gpu-node-07"
    client.force_login(admin_user)
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "<h1>gpu-node-07 " in page
    assert 'id="reported-hostname"><code>gpu-node-01</code>' in page


def test_an_admins_rename_survives_the_next_report(enrolled, post_report, make_report) -> None:
    host, token = enrolled(hostname="gpu-node-07")
    Host.objects.filter(pk=host.pk).update(hostname="rack-3-slot-7")
    assert post_report(make_report(), token).status_code == 202
    assert Host.objects.get(pk=host.pk).hostname == "rack-3-slot-7"


@pytest.mark.parametrize("hostname", ["gpu-node-01\r\nX-Injected: 1", "evil\x1b[2Jnode",
                                      "node\u2028two", "tab\there"])
def test_a_hostname_with_control_characters_is_a_422_naming_the_field(
        enrolled, post_report, make_report, hostname) -> None:
    _, token = enrolled()
    response = post_report(make_report(host={"hostname": hostname}), token)
    assert response.status_code == 422, response.content
    assert [d["path"] for d in response.json()["details"]] == ["host.hostname"]
    assert Report.objects.count() == 0


def test_the_reported_name_is_history_recorded_once_per_change(enrolled, post_report,
                                                               make_report) -> None:
    from fleet.models import ChangeEvent

    host, token = enrolled(hostname="gpu-node-07")
    for name in ("gpu-node-01", "gpu-node-01", "gpu-node-07"):
        assert post_report(make_report(host={"hostname": name}), token).status_code == 202
    events = ChangeEvent.objects.filter(host=host, kind=ChangeEvent.Kind.REPORTED_HOSTNAME)
    assert sorted(events.values_list("old_value", "new_value")) == [
        ("gpu-node-01", "gpu-node-07"), ("gpu-node-07", "gpu-node-01")]
    assert Host.objects.get(pk=host.pk).reported_hostname == "gpu-node-07"
