"""The admin role cannot make itself (or anyone) a superuser, nor take over a superuser.

A non-superuser admin cannot tick ``is_superuser`` on itself in the Django admin, reset a
superuser's password, or "demote" a superuser in Settings.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_role(client, role_user):
    user = role_user("admin")
    client.force_login(user)
    return user


@pytest.fixture
def root(db):
    return get_user_model().objects.create_superuser("root", password="root-pw-for-tests")


def _change_form(user) -> dict:
    return {"username": user.username, "first_name": "", "last_name": "", "email": "",
            "is_active": "on", "is_staff": "on", "is_superuser": "on",
            "groups": [g.pk for g in Group.objects.all()],
            "user_permissions": [Permission.objects.get(codename="delete_user").pk],
            "last_login_0": "", "last_login_1": "", "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00"}


def test_an_admin_cannot_grant_itself_superuser_staff_groups_or_permissions(client,
                                                                           admin_role):
    page = client.get(f"/admin/auth/user/{admin_role.pk}/change/")
    assert page.status_code == 200
    assert 'name="is_superuser"' not in page.content.decode()
    client.post(f"/admin/auth/user/{admin_role.pk}/change/", _change_form(admin_role))
    admin_role.refresh_from_db()
    assert not admin_role.is_superuser
    assert list(admin_role.groups.values_list("name", flat=True)) == ["admin"]
    assert not admin_role.user_permissions.exists()


def test_an_admin_cannot_grant_superuser_to_another_user(client, admin_role, role_user):
    other = role_user("viewer")
    client.post(f"/admin/auth/user/{other.pk}/change/", _change_form(other))
    other.refresh_from_db()
    assert not other.is_superuser and not other.is_staff


def test_an_admin_cannot_reset_a_superusers_password(client, admin_role, root):
    url = f"/admin/auth/user/{root.pk}/password/"
    answer = client.post(url, {"password1": "taken-over-9x!Q", "password2": "taken-over-9x!Q",
                               "usable_password": "true"})
    assert answer.status_code == 403
    root.refresh_from_db()
    assert root.check_password("root-pw-for-tests")
    client.post(f"/admin/auth/user/{root.pk}/change/", {**_change_form(root),
                                                        "is_superuser": ""})
    root.refresh_from_db()
    assert root.is_superuser


def test_a_superuser_still_grants_superuser_in_the_admin(client, root, role_user):
    other = role_user("viewer")
    client.force_login(root)
    answer = client.post(f"/admin/auth/user/{other.pk}/change/", _change_form(other))
    assert answer.status_code == 302
    other.refresh_from_db()
    assert other.is_superuser


def test_settings_refuses_to_demote_a_superuser_and_says_so(client, admin_role, root):
    answer = client.post(f"/settings/users/{root.pk}/role/", {"role": "viewer"}, follow=True)
    shown = [str(m) for m in answer.context["messages"]]
    assert any("superuser" in m for m in shown), shown
    assert not any("is now viewer" in m for m in shown)
    root.refresh_from_db()
    assert root.is_superuser


def test_settings_deactivates_a_user_who_then_cannot_sign_in(client, admin_role, role_user):
    from django.test import Client

    victim = role_user("operator")
    page = client.get("/settings/").content.decode()
    assert f"/settings/users/{victim.pk}/active/" in page
    client.post(f"/settings/users/{victim.pk}/active/", {"active": "0"})
    victim.refresh_from_db()
    assert not victim.is_active
    other = Client()
    assert not other.login(username=victim.username, password="pw-for-dashboard-tests")
    client.post(f"/settings/users/{victim.pk}/active/", {"active": "1"})
    victim.refresh_from_db()
    assert victim.is_active


def test_an_admin_cannot_deactivate_itself_or_a_superuser(client, admin_role, root):
    client.post(f"/settings/users/{admin_role.pk}/active/", {"active": "0"})
    client.post(f"/settings/users/{root.pk}/active/", {"active": "0"})
    admin_role.refresh_from_db()
    root.refresh_from_db()
    assert admin_role.is_active and root.is_active


def test_a_viewer_cannot_deactivate_anyone(client, role_user):
    viewer = role_user("viewer")
    target = role_user("operator")
    client.force_login(viewer)
    assert client.post(f"/settings/users/{target.pk}/active/", {"active": "0"}).status_code == 403
    target.refresh_from_db()
    assert target.is_active
