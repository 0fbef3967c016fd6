"""Favicon, admin names, page titles, Add host in the menu,
make test leaving apt-get to CI, no leftover LEAD notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_favicon_is_served_from_static(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.ico")
    assert (ROOT / "static" / "favicon.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"


def test_the_admin_says_gpus():
    from fleet.models import Gpu

    assert str(Gpu._meta.verbose_name_plural) == "GPUs"


def test_every_page_title_names_the_product():
    titles = []
    for path in ROOT.glob("*/templates/**/*.html"):
        titles += re.findall(r"\{% block title %\}(.*?)\{% endblock %\}", path.read_text())
    assert titles
    assert [t for t in titles if not t.endswith("vLLM Fleet Audit")] == []


@pytest.mark.django_db
def test_add_host_is_in_the_menu_for_admins_only(client, role_user):
    client.force_login(role_user("admin"))
    assert 'href="/agent/add-host/"' in client.get("/").content.decode()
    client.force_login(role_user("viewer"))
    assert 'href="/agent/add-host/"' not in client.get("/").content.decode()


def test_make_test_never_installs_packages_and_no_lead_notes_remain():
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert not re.search(r"^\s*[^#\s].*apt-get install", test_target.replace(
        "(install it: apt-get install -y chromium)", ""), re.M)
    for path in [*ROOT.glob("config/*.py"), *ROOT.glob("*/urls*.py")]:
        assert "LEAD" not in path.read_text(), path
