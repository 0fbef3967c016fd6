"""Sign-in throttling and password rules for new users."""

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


def test_ten_failures_lock_the_attackers_address_not_the_owner(role_user, settings):
    """The reported hole: 10 anonymous failures used to refuse the owner's right password."""
    settings.LOGIN_FAILURE_LIMIT = 10
    user = role_user("viewer")
    attacker = "198.51.100.7"
    for i in range(10):
        answer = _login(Client(), user.username, f"guess-{i}", ip=attacker)
        assert answer.status_code == 200 and "_auth_user_id" not in answer.client.session
    answer = _login(Client(), user.username, PASSWORD, ip=attacker)
    assert answer.status_code == 429
    assert "Too many failed sign-ins" in answer.content.decode()
    assert "_auth_user_id" not in answer.client.session
    owner = _login(Client(), user.username, PASSWORD, ip="192.0.2.77")
    assert owner.status_code == 302 and "_auth_user_id" in owner.client.session


def test_a_distributed_guess_gives_each_failing_address_one_try_and_spares_the_owner(
        role_user, settings):
    settings.LOGIN_USER_FAILURE_LIMIT = 20
    user = role_user("viewer")
    for i in range(20):  # one guess from each of 20 addresses
        _login(Client(), user.username, f"guess-{i}", ip=f"198.51.100.{i}")
    assert _login(Client(), user.username, PASSWORD, ip="198.51.100.3").status_code == 429
    assert _login(Client(), user.username, PASSWORD, ip="192.0.2.50").status_code == 302


def test_failures_over_many_usernames_lock_that_address_for_every_username(role_user,
                                                                            settings):
    settings.LOGIN_IP_FAILURE_LIMIT = 10
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
    answer = _login(Client(), admin.username, PASSWORD, path="/admin/login/")
    assert "Too many failed sign-ins" in answer.content.decode()
    assert "_auth_user_id" not in answer.client.session
    answer = _login(Client(), admin.username, PASSWORD, path="/admin/login/", ip="192.0.2.9")
    assert "_auth_user_id" in answer.client.session


def test_behind_the_proxy_the_address_is_the_proxys_x_real_ip(role_user, settings):
    """One client-IP rule (fleet.client_ip): behind the proxy X-Real-IP names the client;
    without it a client-sent X-Real-IP is ignored."""
    settings.BEHIND_PROXY = True
    user = role_user("viewer")
    for i in range(10):  # all through the proxy (one REMOTE_ADDR), one attacker
        Client().post("/accounts/login/", {"username": user.username, "password": f"g{i}"},
                      REMOTE_ADDR="10.0.0.2", HTTP_X_REAL_IP="198.51.100.9")
    owner = Client().post("/accounts/login/", {"username": user.username, "password": PASSWORD},
                          REMOTE_ADDR="10.0.0.2", HTTP_X_REAL_IP="192.0.2.10")
    assert owner.status_code == 302
    settings.BEHIND_PROXY = False
    for i in range(10):  # no proxy: a forged header does not give a fresh address
        Client().post("/accounts/login/", {"username": "x", "password": f"g{i}"},
                      REMOTE_ADDR="203.0.113.40", HTTP_X_REAL_IP=f"192.0.2.{100 + i}")
    spoofed = Client().post("/accounts/login/", {"username": "x", "password": "g"},
                            REMOTE_ADDR="203.0.113.40", HTTP_X_REAL_IP="192.0.2.200")
    assert spoofed.status_code == 429


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
