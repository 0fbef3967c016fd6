"""Sign-in throttling and password rules for new users (issue 16 item 17)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-dashboard-tests"  # noqa: S105 (role_user's test credential)


@pytest.fixture(autouse=True)
def fast_hashing(settings):
    """Dozens of sign-ins per test: a cheap hasher keeps them from dominating the run."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _login(client: Client, username: str, password: str, ip: str = "203.0.113.5",
           path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password},
                       REMOTE_ADDR=ip)


def test_ten_failures_lock_the_username_even_for_the_right_password(role_user, settings):
    settings.LOGIN_FAILURE_LIMIT = 10
    user = role_user("viewer")
    for i in range(10):  # spread over addresses: the username count still adds up
        answer = _login(Client(), user.username, f"guess-{i}", ip=f"198.51.100.{i}")
        assert answer.status_code == 200 and "_auth_user_id" not in answer.client.session
    answer = _login(Client(), user.username, PASSWORD, ip="192.0.2.77")
    assert answer.status_code == 429
    assert "Too many failed sign-ins" in answer.content.decode()
    assert "_auth_user_id" not in answer.client.session


def test_ten_failures_from_one_address_lock_that_address_for_every_username(role_user):
    user = role_user("viewer")
    for i in range(10):
        _login(Client(), f"nobody-{i}", "guess")
    assert _login(Client(), user.username, PASSWORD).status_code == 429
    other_address = _login(Client(), user.username, PASSWORD, ip="192.0.2.8")
    assert other_address.status_code == 302  # signed in from elsewhere


def test_the_admin_login_shares_the_throttle(role_user):
    admin = role_user("admin")
    for i in range(10):
        _login(Client(), admin.username, f"guess-{i}", path="/admin/login/")
    answer = _login(Client(), admin.username, PASSWORD, path="/admin/login/",
                    ip="192.0.2.9")
    assert "Too many failed sign-ins" in answer.content.decode()
    assert "_auth_user_id" not in answer.client.session


def test_the_window_ends_and_a_success_clears_the_username(role_user, settings):
    from django.core.cache import cache

    user = role_user("viewer")
    for i in range(9):
        _login(Client(), user.username, f"guess-{i}", ip=f"198.51.100.{i}")
    assert _login(Client(), user.username, PASSWORD, ip="192.0.2.1").status_code == 302
    for i in range(9):  # the count restarted at the success
        _login(Client(), user.username, f"again-{i}", ip=f"198.51.100.{i}")
    assert _login(Client(), user.username, PASSWORD, ip="192.0.2.2").status_code == 302
    cache.clear()  # the window passing
    assert _login(Client(), user.username, PASSWORD, ip="192.0.2.3").status_code == 302


@pytest.mark.parametrize(("password", "reason"), [("password123", "too common"),
                                                   ("83749201937", "entirely numeric"),
                                                   ("short", "at least 8 characters"),
                                                   ("new-colleague", "too similar")])
def test_the_settings_new_user_form_runs_the_password_validators(client, role_user, password,
                                                                 reason):
    client.force_login(role_user("admin"))
    answer = client.post("/settings/users/", {"username": "new-colleague",
                                              "password": password, "role": "viewer"})
    assert answer.status_code == 200 and reason in answer.content.decode()
    assert not get_user_model().objects.filter(username="new-colleague").exists()


def test_a_strong_password_creates_the_user(client, role_user):
    client.force_login(role_user("admin"))
    client.post("/settings/users/", {"username": "colleague", "password": "tq8#Lm2!vR9w",
                                     "role": "viewer"})
    assert get_user_model().objects.get(username="colleague").check_password("tq8#Lm2!vR9w")
