"""The knowledge-base page: the active KB, its coverage, and staleness for the fleet."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.kb_bundle.test_kb_update import EXTRA_RULE, _add_rule, _update

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client, db):
    from django.contrib.auth import get_user_model

    from fleet.access import set_role

    user = get_user_model().objects.create_user("kb-viewer")
    set_role(user, "viewer")
    client.force_login(user)
    return client


def _row(page: str, attr: str, value: str) -> str:
    return page.split(f'{attr}="{value}"')[1].split("</tr>")[0]


def test_the_kb_page_shows_the_built_in_kb_and_its_coverage(viewer, kb_settings):
    page = viewer.get("/kb/").content.decode()

    assert "built-in" in page and "Verified through" in page
    assert re.search(r"vLLM <code>0\.30\.0</code>", page)
    gemma = _row(page, "data-family", "gemma4")
    assert int(re.search(r'class="num">(\d+)<', gemma).group(1)) >= 30
    assert "not yet" not in _row(page, "data-release", "0.30.0")
    assert int(re.search(r'class="num">(\d+)<', _row(page, "data-release", "0.25.1")
                         ).group(1)) >= 1
    assert 'id="kb-stale"' not in page


def test_the_kb_page_shows_an_installed_bundle(viewer, kb_settings, make_bundle):
    path = make_bundle(_add_rule(EXTRA_RULE))
    assert _update(path)[0] == 0
    from audit.models import KnowledgeBaseInstall

    row = KnowledgeBaseInstall.objects.get()
    page = viewer.get("/kb/").content.decode()

    assert row.version in page and str(path) in page and "signed bundle" in page
    assert 'data-rule="bundle-test-every-vllm-server"' in page


def test_a_kb_older_than_thirty_days_is_flagged_and_alerted_once(viewer, kb_settings,
                                                                  make_bundle):
    from alerts.models import AlertChannel, Delivery
    from audit import kb_status

    AlertChannel.objects.create(kind="email", name="admins", destination="ops@example.com",
                                min_severity="high")
    assert _update(make_bundle(_add_rule(EXTRA_RULE)))[0] == 0
    later = timezone.now() + timedelta(days=40)

    assert kb_status.alert_if_stale(now=later) == 1
    assert kb_status.alert_if_stale(now=later) == 0
    delivery = Delivery.objects.get()
    assert delivery.trigger == "knowledge_base" and "days old" in delivery.message["summary"]


def test_a_fleet_running_a_newer_vllm_than_the_kb_gets_a_banner(viewer, kb_settings,
                                                                 enrolled, post_report,
                                                                 make_report):
    host, token = enrolled()
    assert post_report(make_report(server={"vllm_version": "0.33.0"}), token).status_code == 202

    page = viewer.get("/kb/").content.decode()

    banner = page.split('id="kb-stale"')[1].split("</div>")[0]
    assert "vLLM 0.33.0 runs in the fleet" in banner and "0.30.0" in banner
    assert "not yet" in _row(page, "data-release", "0.33.0")
