"""An enrollment secret cannot take over a host, through the real API.

Re-enrolling a machine that has a live token is pending until an admin approves it in
Settings (the old token works until then); secrets have a use limit and an expiry; tokens die
with the secret that minted them; refused attempts are rate-limited per IP and per secret;
the agent's re-install replaces its own token and its uninstall revokes it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from fleet.access import set_role
from fleet.models import AgentToken, EnrollmentSecret, Host

pytestmark = pytest.mark.django_db


def enroll(client: Client, secret: str, machine_id: str = "machine-1",
           hostname: str = "gpu-node-1", ip: str = "10.0.0.1", **extra):
    meta = {k: extra.pop(k) for k in list(extra) if k.startswith("HTTP_")}
    return client.post("/api/v1/enroll", {"secret": secret, "machine_id": machine_id,
                                          "hostname": hostname, **extra},
                       content_type="application/json", REMOTE_ADDR=ip, **meta)


@pytest.fixture
def admin(client, django_user_model) -> Client:
    user = django_user_model.objects.create_user("boss", password="pw")
    set_role(user, "admin")
    admin = Client()
    admin.force_login(user)
    return admin


def test_re_enrolling_a_live_machine_is_pending_until_an_admin_approves(
        client, admin, post_report, make_report) -> None:
    _, secret = EnrollmentSecret.create("rack-a")
    real = enroll(client, secret, hostname="real-node").json()["token"]
    _, other = EnrollmentSecret.create("leaked")

    attempt = enroll(client, other, hostname="attacker", ip="10.6.6.6")
    assert attempt.status_code == 202
    assert attempt.json()["pending"] is True and attempt.json()["host"] == "attacker"
    new = attempt.json()["token"]
    refused = post_report(make_report(), token=new)
    assert refused.status_code == 403 and "approval" in refused.json()["error"]
    assert post_report(make_report(), token=real).status_code == 202
    assert Host.objects.get().hostname == "real-node"  # the enrolled name, not the attacker's

    page = admin.get("/settings/").content.decode()
    assert "Pending enrollments" in page and "attacker" in page and "10.6.6.6" in page
    pending = AgentToken.objects.get(pending=True)
    assert admin.post(f"/settings/enrollments/{pending.pk}/approve/").status_code == 302
    assert post_report(make_report(), token=real).status_code == 401
    assert post_report(make_report(), token=new).status_code == 202


def test_a_denied_re_enrollment_never_works(client, admin, post_report, make_report) -> None:
    _, secret = EnrollmentSecret.create("rack-a", max_uses=2)
    real = enroll(client, secret).json()["token"]
    new = enroll(client, secret).json()["token"]
    pending = AgentToken.objects.get(pending=True)
    admin.post(f"/settings/enrollments/{pending.pk}/deny/")
    assert post_report(make_report(), token=new).status_code == 401
    assert post_report(make_report(), token=real).status_code == 202


def test_a_reinstall_presenting_its_live_token_replaces_it_at_once(client, post_report,
                                                                   make_report) -> None:
    _, secret = EnrollmentSecret.create("rack-a", max_uses=2)
    old = enroll(client, secret).json()["token"]
    again = enroll(client, secret, previous_token=old)
    assert again.status_code == 201 and again.json()["pending"] is False
    assert post_report(make_report(), token=old).status_code == 401
    assert post_report(make_report(), token=again.json()["token"]).status_code == 202


def test_a_secret_enrolls_only_its_number_of_machines_and_only_until_it_expires(client):
    _, once = EnrollmentSecret.create("one machine")
    assert enroll(client, once, machine_id="m-1").status_code == 201
    assert enroll(client, once, machine_id="m-2").status_code == 403
    row, late = EnrollmentSecret.create("expired", max_uses=5, valid_for=timedelta(hours=1))
    EnrollmentSecret.objects.filter(pk=row.pk).update(expires_at=row.created_at)
    assert enroll(client, late, machine_id="m-3").status_code == 403
    assert not Host.objects.filter(machine_id__in=["m-2", "m-3"]).exists()


def test_revoking_a_secret_revokes_the_tokens_it_minted(client, admin, post_report,
                                                        make_report) -> None:
    row, secret = EnrollmentSecret.create("leaked")
    token = enroll(client, secret).json()["token"]
    assert post_report(make_report(), token=token).status_code == 202
    admin.post(f"/settings/secrets/{row.pk}/revoke/")
    assert post_report(make_report(), token=token).status_code == 401
    assert AgentToken.objects.get().secret == row


def test_guessing_secrets_is_rate_limited_per_ip_and_per_secret(client, settings) -> None:
    settings.ENROLL_RATE, settings.ENROLL_BURST = (1, 60), 3
    for n in range(3):
        assert enroll(client, f"fes_guess{n}", ip="10.9.9.9").status_code == 403
    limited = enroll(client, "fes_guess-more", ip="10.9.9.9")
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    _, secret = EnrollmentSecret.create("rack-a", max_uses=5)
    assert enroll(client, secret, ip="10.9.9.9").status_code == 429
    assert enroll(client, secret, ip="10.1.1.1").status_code == 201
    for n in range(3):  # one secret tried from many addresses
        enroll(client, "fes_same-guess", ip=f"10.2.0.{n}")
    assert enroll(client, "fes_same-guess", ip="10.2.0.99").status_code == 429


@pytest.mark.parametrize("field,value", [("secret", "x" * 10_000_000), ("secret", "x" * 129),
                                         ("hostname", "h" * 256), ("machine_id", "m\x00id"),
                                         ("hostname", "a\ud800b")])
def test_enrollment_fields_are_bounded(client, field, value) -> None:
    _, secret = EnrollmentSecret.create("rack-a")
    body = {"secret": secret, "machine_id": "m", "hostname": "h", field: value}
    response = client.post("/api/v1/enroll", body, content_type="application/json")
    assert response.status_code in (413, 422), response.content[:200]
    assert not Host.objects.exists()


def test_the_agent_token_revokes_itself(client, post_report, make_report) -> None:
    _, secret = EnrollmentSecret.create("rack-a")
    token = enroll(client, secret).json()["token"]
    revoked = client.post("/api/v1/revoke", headers={"Authorization": f"Bearer {token}"})
    assert revoked.status_code == 200
    assert post_report(make_report(), token=token).status_code == 401


def test_an_uninstall_can_revoke_a_pending_token(client) -> None:
    _, secret = EnrollmentSecret.create("rack-a", max_uses=2)
    enroll(client, secret)
    pending = enroll(client, secret).json()["token"]
    assert client.post("/api/v1/revoke",
                       headers={"Authorization": f"Bearer {pending}"}).status_code == 200
    assert not AgentToken.objects.filter(pending=True, revoked_at=None).exists()


def test_behind_the_proxy_rate_limits_and_requested_from_use_the_proxys_client_ip(
        client, settings) -> None:
    """One client-IP rule (fleet.client_ip), as the sign-in throttle uses: behind the proxy
    every request comes from the proxy's address, so X-Real-IP must name the client."""
    settings.BEHIND_PROXY = True
    settings.ENROLL_RATE, settings.ENROLL_BURST = (1, 60), 3
    for n in range(3):
        assert enroll(client, f"fes_guess{n}", ip="10.0.0.2",
                      HTTP_X_REAL_IP="198.51.100.4").status_code == 403
    assert enroll(client, "fes_guess9", ip="10.0.0.2",
                  HTTP_X_REAL_IP="198.51.100.4").status_code == 429
    _, secret = EnrollmentSecret.create("rack-a", max_uses=5)
    assert enroll(client, secret, ip="10.0.0.2", HTTP_X_REAL_IP="192.0.2.5").status_code == 201
    again = enroll(client, secret, ip="10.0.0.2", hostname="again",
                   HTTP_X_REAL_IP="192.0.2.6")
    assert again.status_code == 202
    assert str(AgentToken.objects.get(pending=True).requested_from) == "192.0.2.6"
