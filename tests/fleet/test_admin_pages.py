"""The Django admin manages hosts, tokens, enrollment secrets and reports."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fleet.models import AgentToken, EnrollmentSecret

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-tests"))
    return client


def test_the_admin_lists_hosts_tokens_secrets_and_reports(admin_client, post_report,
                                                          make_report, enrolled):
    _, token = enrolled()
    post_report(make_report(), token=token)
    for model in ("host", "agenttoken", "enrollmentsecret", "report", "server"):
        response = admin_client.get(f"/admin/fleet/{model}/")
        assert response.status_code == 200, model
    assert token not in admin_client.get("/admin/fleet/agenttoken/").content.decode()


def test_adding_a_secret_in_the_admin_shows_it_once_and_stores_its_hash(admin_client, client):
    response = admin_client.post("/admin/fleet/enrollmentsecret/add/", {"name": "rack-a"},
                                 follow=True)
    assert response.status_code == 200
    shown = next(str(m) for m in response.context["messages"] if "shown once" in str(m))
    plaintext = shown.rsplit(" ", 1)[-1]
    assert EnrollmentSecret.match(plaintext) is not None
    enrolled = client.post("/api/v1/enroll", {"secret": plaintext, "machine_id": "m",
                                              "hostname": "h"}, content_type="application/json")
    assert enrolled.status_code == 201


def test_revoking_a_token_in_the_admin_locks_the_agent_out(admin_client, post_report,
                                                          make_report, enrolled):
    _, token = enrolled()
    row = AgentToken.objects.get()
    admin_client.post("/admin/fleet/agenttoken/", {"action": "revoke",
                                                   "_selected_action": [row.pk]})
    assert post_report(make_report(), token=token).status_code == 401
