"""Enrollment: a secret buys a host token, shown once and stored only as a hash."""

from __future__ import annotations

import hashlib

import pytest

from fleet.models import AgentToken, EnrollmentSecret, Host

pytestmark = pytest.mark.django_db


def enroll(client, secret: str, machine_id: str = "machine-1", hostname: str = "gpu-node-1"):
    return client.post("/api/v1/enroll", {"secret": secret, "machine_id": machine_id,
                                          "hostname": hostname}, content_type="application/json")


def test_a_wrong_secret_is_refused_and_creates_nothing(client):
    EnrollmentSecret.create("rack-a")
    response = enroll(client, "fes_wrong")
    assert response.status_code == 403
    assert set(response.json()) == {"error", "details"}
    assert not Host.objects.exists() and not AgentToken.objects.exists()


def test_a_revoked_secret_is_refused(client):
    row, secret = EnrollmentSecret.create("rack-a")
    row.revoked_at = row.created_at
    row.save()
    assert enroll(client, secret).status_code == 403


def test_a_missing_field_is_a_422_with_its_path(client):
    response = client.post("/api/v1/enroll", {"secret": "x"}, content_type="application/json")
    assert response.status_code == 422
    assert {d["path"] for d in response.json()["details"]} >= {"payload.machine_id",
                                                               "payload.hostname"}


def test_the_issued_token_works_until_it_is_revoked(client, post_report, make_report):
    _, secret = EnrollmentSecret.create("rack-a")
    response = enroll(client, secret)
    assert response.status_code == 201
    token = response.json()["token"]
    assert post_report(make_report(), token=token).status_code == 202
    AgentToken.objects.get().revoke()
    assert post_report(make_report(), token=token).status_code == 401


def test_tokens_and_secrets_are_not_stored_in_clear(client):
    secret_row, secret = EnrollmentSecret.create("rack-a")
    token = enroll(client, secret).json()["token"]
    row = AgentToken.objects.get()
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in (row.token_hash, row.prefix)
    assert secret_row.secret_hash != secret
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM fleet_agenttoken")
        assert token not in repr(cursor.fetchall())


def test_re_enrolling_a_machine_reuses_its_host(client):
    _, secret = EnrollmentSecret.create("rack-a", max_uses=2)
    enroll(client, secret)
    assert enroll(client, secret, hostname="renamed").status_code == 202  # pending approval
    assert Host.objects.count() == 1
    assert AgentToken.objects.count() == 2
