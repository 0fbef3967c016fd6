"""Enrollment for autoscaled node pools: a secret made with the pool's uses and lifetime
(``create_enrollment_secret --uses/--valid-days``, or the Settings form) keeps enrolling new
nodes, and the secret's page lists every machine it enrolled."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from fleet.access import set_role
from fleet.models import EnrollmentSecret
from tests.fleet.test_enrollment_security import enroll

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model) -> Client:
    user = django_user_model.objects.create_user("boss", password="pw")
    set_role(user, "admin")
    admin = Client()
    admin.force_login(user)
    return admin


def test_a_pool_secret_from_the_command_enrolls_many_nodes_for_a_year(client):
    out, err = StringIO(), StringIO()
    call_command("create_enrollment_secret", "pool-h100", "--uses", "100000",
                 "--valid-days", "365", stdout=out, stderr=err)
    plaintext = out.getvalue().strip()
    row = EnrollmentSecret.objects.get(name="pool-h100")
    assert row.max_uses == 100000
    assert timedelta(days=364) < row.expires_at - timezone.now() <= timedelta(days=365)
    assert "100000 use(s)" in err.getvalue()
    for n in range(25):  # a scale-up: every new node uses the same secret
        assert enroll(client, plaintext, machine_id=f"node-{n}",
                      hostname=f"gpu-{n}", ip=f"10.1.0.{n}").status_code == 201
    row.refresh_from_db()
    assert row.uses == 25 and row.state == "usable"


def test_the_command_refuses_out_of_range_uses_and_lifetimes():
    with pytest.raises(CommandError, match="uses must be"):
        call_command("create_enrollment_secret", "x", "--uses", "0", stdout=StringIO())
    with pytest.raises(CommandError, match="valid 1 to"):
        call_command("create_enrollment_secret", "x", "--valid-days", "5000",
                     stdout=StringIO())
    assert not EnrollmentSecret.objects.exists()


def test_the_settings_form_takes_a_pool_sized_secret(admin):
    page = admin.post("/settings/secrets/", {"name": "pool-mi300", "max_uses": "100000",
                                             "valid_hours": str(2 * 365 * 24)})
    assert page.status_code == 200 and "pool-mi300" in page.content.decode()
    row = EnrollmentSecret.objects.get(name="pool-mi300")
    assert row.max_uses == 100000
    assert row.expires_at - timezone.now() > timedelta(days=729)


def test_the_secret_page_lists_what_it_enrolled(client, admin):
    row, secret = EnrollmentSecret.create("pool-a", max_uses=10)
    other, other_secret = EnrollmentSecret.create("rack-b")
    for n in range(3):
        enroll(client, secret, machine_id=f"pool-{n}", hostname=f"pool-node-{n}")
    enroll(client, other_secret, machine_id="rack-1", hostname="rack-node-1")
    settings_page = admin.get("/settings/").content.decode()
    assert f"/settings/secrets/{row.pk}/" in settings_page
    page = admin.get(f"/settings/secrets/{row.pk}/").content.decode()
    for n in range(3):
        assert f"pool-node-{n}" in page
    assert "rack-node-1" not in page
    assert "3/10 uses" in page and "3 hosts" in page


def test_the_secret_page_is_for_admins_only(client, django_user_model):
    row, _ = EnrollmentSecret.create("pool-a")
    viewer = django_user_model.objects.create_user("eve", password="pw")
    set_role(viewer, "viewer")
    client.force_login(viewer)
    assert client.get(f"/settings/secrets/{row.pk}/").status_code == 403
