"""Roles are enforced on the server: what viewers, operators and admins may do."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import Finding, FindingEvent
from fleet.models import AgentToken, EnrollmentSecret, sha256_hex

pytestmark = pytest.mark.django_db

READ_PAGES = ("/", "/findings/", "/kb/", "/versions/", "/findings/export.csv",
              "/findings/export.json")


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_can_read_the_dashboard_pages(client, demo_fleet, role_user, role):
    client.force_login(role_user(role))
    host = demo_fleet["hosts"][0]
    finding = Finding.objects.first()
    paths = [*READ_PAGES, f"/hosts/{host.code}/", f"/findings/{finding.code}/",
             f"/kb/{finding.rule_id}/"]
    for path in paths:
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("operator", 403),
                                               ("admin", 200)])
def test_only_admins_reach_the_settings_page(client, role_user, role, status):
    client.force_login(role_user(role))
    assert client.get("/settings/").status_code == status


def test_a_viewer_cannot_acknowledge_or_silence_a_finding(client, demo_fleet, role_user):
    client.force_login(role_user("viewer"))
    finding = Finding.objects.active().first()
    ack = client.post(f"/findings/{finding.code}/acknowledge/", {"note": "mine"})
    silence = client.post(f"/findings/{finding.code}/silence/",
                          {"duration": "1d", "reason": "noise"})
    assert (ack.status_code, silence.status_code) == (403, 403)
    finding.refresh_from_db()
    assert finding.status == Finding.Status.OPEN
    assert not FindingEvent.objects.filter(finding=finding,
                                           kind=FindingEvent.Kind.ACKNOWLEDGED).exists()


def test_a_viewer_sees_no_acknowledge_button(client, demo_fleet, role_user):
    client.force_login(role_user("viewer"))
    page = client.get("/findings/").content.decode()
    assert "Acknowledge</button>" not in page and "Silence</button>" not in page


def test_an_operator_acknowledges_with_a_note_recorded_with_the_user(client, demo_fleet,
                                                                      role_user):
    operator = role_user("operator")
    client.force_login(operator)
    finding = Finding.objects.active().first()
    answer = client.post(f"/findings/{finding.code}/acknowledge/",
                         {"note": "rolling back tonight", "next": "/findings/"})
    assert answer.status_code == 302 and answer["Location"] == "/findings/"
    finding.refresh_from_db()
    assert finding.status == "acknowledged" and finding.acknowledged_by == operator
    assert finding.ack_note == "rolling back tonight"
    history = client.get(f"/findings/{finding.code}/").content.decode()
    assert "acknowledged" in history and "operator-user" in history
    assert "rolling back tonight" in history


def test_an_operator_silences_until_a_time_with_a_reason(client, demo_fleet, role_user):
    operator = role_user("operator")
    client.force_login(operator)
    finding = Finding.objects.active().first()
    client.post(f"/findings/{finding.code}/silence/",
                {"duration": "", "until": "2099-01-02T03:04", "reason": "known, ticket OPS-1"})
    finding.refresh_from_db()
    assert finding.status == "silenced" and finding.silenced_by == operator
    assert finding.silenced_until.isoformat().startswith("2099-01-02T03:04")
    assert finding.silence_reason == "known, ticket OPS-1"


def test_a_silence_without_a_reason_or_in_the_past_is_refused(client, demo_fleet, role_user):
    client.force_login(role_user("operator"))
    finding = Finding.objects.active().first()
    client.post(f"/findings/{finding.code}/silence/", {"duration": "1d", "reason": ""})
    page = client.post(f"/findings/{finding.code}/silence/",
                       {"duration": "", "until": "2001-01-01T00:00", "reason": "old"},
                       follow=True).content.decode()
    finding.refresh_from_db()
    assert finding.status == "open"
    assert "must end in the future" in page


def test_forms_refuse_a_post_without_the_csrf_token(demo_fleet, role_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admin"))
    finding = Finding.objects.active().first()
    assert client.post(f"/findings/{finding.code}/acknowledge/").status_code == 403
    assert client.post("/settings/secrets/", {"name": "x"}).status_code == 403
    finding.refresh_from_db()
    assert finding.status == "open"


def test_an_operator_cannot_create_secrets_or_revoke_tokens(client, demo_fleet, role_user):
    client.force_login(role_user("operator"))
    token = AgentToken.objects.filter(revoked_at=None).first()
    assert client.post("/settings/secrets/", {"name": "rack-9"}).status_code == 403
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None and not EnrollmentSecret.objects.filter(name="rack-9")


def test_an_admin_sees_a_new_secret_once_and_only_its_hash_is_kept(client, role_user):
    client.force_login(role_user("admin"))
    page = client.post("/settings/secrets/", {"name": "rack-12"}).content.decode()
    row = EnrollmentSecret.objects.get(name="rack-12")
    plaintext = page.split('class="secret">')[1].split("<")[0]
    assert plaintext.startswith("fes_") and row.secret_hash == sha256_hex(plaintext)
    assert plaintext not in client.get("/settings/").content.decode()


def test_an_admin_revokes_a_host_token_and_the_agent_is_refused(client, demo_fleet, role_user,
                                                                post_report, make_report,
                                                                enrolled):
    host, token = enrolled(machine_id="machine-revoke", hostname="to-revoke")
    client.force_login(role_user("admin"))
    row = AgentToken.objects.get(host=host)
    assert client.post(f"/settings/tokens/{row.pk}/revoke/").status_code == 302
    client.logout()
    refused = post_report(make_report(host={"machine_id": "machine-revoke"}), token=token)
    assert refused.status_code == 401


def test_an_admin_creates_a_user_and_changes_roles(client, role_user):
    from django.contrib.auth import get_user_model

    from fleet.access import role_of

    client.force_login(role_user("admin"))
    client.post("/settings/users/", {"username": "night-shift", "password": "long-enough-pw",
                                     "role": "operator"})
    user = get_user_model().objects.get(username="night-shift")
    assert role_of(user) == "operator"
    client.post(f"/settings/users/{user.pk}/role/", {"role": "viewer"})
    assert role_of(get_user_model().objects.get(pk=user.pk)) == "viewer"
    client.post(f"/settings/users/{user.pk}/role/", {"role": "admin"})
    promoted = get_user_model().objects.get(pk=user.pk)
    assert role_of(promoted) == "admin" and promoted.is_staff


def test_make_roles_creates_the_groups_and_assigns_a_role(role_user):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from fleet.access import role_of

    get_user_model().objects.create_user("carol")
    call_command("make_roles", "--user", "carol", "--role", "operator")
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "operator", "admin"}
    assert role_of(get_user_model().objects.get(username="carol")) == "operator"
