"""Hostile query parameters never reach PostgreSQL or int() (harden item 7): a NUL in any
GET parameter is a 400 on every page; a non-ASCII digit where an id belongs is "no such"."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(role_user) -> Client:
    client = Client()
    client.force_login(role_user("admin"))
    return client


@pytest.mark.parametrize("url", [
    "/?q=%00", "/?model=a%00b", "/?version=%00", "/?gpu=%00", "/?label=k%00", "/?%00=1",
    "/findings/?rule=%00", "/findings/?host=%00", "/settings/?q=%00", "/plan/?model=%00",
])
def test_a_nul_in_any_query_parameter_is_a_400(admin, url):
    answer = admin.get(url)
    assert answer.status_code == 400
    assert "NUL" in answer.content.decode()


@pytest.mark.parametrize("url", ["/", "/?q=gpu", "/findings/?rule=x", "/settings/?q=a"])
def test_ordinary_queries_still_answer(admin, url):
    assert admin.get(url).status_code == 200


@pytest.mark.parametrize("server", ["\u00b2", "\u0663", "9" * 40, "-1"])
def test_a_server_id_that_is_not_an_ascii_number_is_no_such_server(admin, server):
    answer = admin.get("/plan/", {"server": server})
    assert answer.status_code == 200
    assert "no such server" in answer.content.decode()
