"""The dashboard serves the agent installer and wheel to nodes without a login."""

from __future__ import annotations

import html
import subprocess
import zipfile
from pathlib import Path

import pytest

from fleet.access import set_role
from fleet.agent_dist import build_agent_wheel, wheel_name
from fleet.models import EnrollmentSecret

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="session")
def built_var(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A VAR_DIR whose ``dist/`` holds the agent wheel, built once per test session."""
    var = tmp_path_factory.mktemp("agent-var")
    build_agent_wheel(out_dir=var / "dist")
    return var


def test_the_install_script_needs_no_login_and_points_at_this_dashboard(client, settings,
                                                                       built_var):
    settings.SITE_URL = "https://fleet.example.com"
    settings.VAR_DIR = built_var
    response = client.get("/agent/install.sh")

    assert response.status_code == 200
    text = response.content.decode()
    assert text.startswith("#!/bin/sh")
    assert 'SITE_URL="${FLEET_SITE_URL:-https://fleet.example.com}"' in text
    assert wheel_name() in text
    assert "__SITE_URL__" not in text


def test_the_served_wheel_installs_the_agent_without_the_server_extras(client, settings,
                                                                        tmp_path, built_var):
    settings.VAR_DIR = built_var
    response = client.get(f"/agent/dist/{wheel_name()}")

    assert response.status_code == 200
    path = tmp_path / "got.whl"
    path.write_bytes(b"".join(response.streaming_content))
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "fleet_agent/install.sh" in names
    assert not any(n.startswith(("fleet/", "audit/", "config/")) for n in names)
    required = [line for line in metadata.splitlines()
                if line.startswith("Requires-Dist") and "extra ==" not in line]
    assert not any(dep in " ".join(required) for dep in ("Django", "celery", "psycopg"))


def test_only_the_current_wheel_is_served(client):
    assert client.get("/agent/dist/evil.whl").status_code == 404


def test_a_missing_wheel_answers_503_with_the_build_command_and_builds_nothing(
        client, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(subprocess, "Popen", _no_child_process)

    response = client.get(f"/agent/dist/{wheel_name()}")

    assert response.status_code == 503
    assert "manage.py build_agent_wheel" in response.content.decode()
    assert not (tmp_path / "dist").exists()


def _no_child_process(*args, **kwargs):
    raise AssertionError(f"a request started a process: {args}")


def test_the_wheel_is_built_from_the_agent_package_alone(built_var):
    with zipfile.ZipFile(built_var / "dist" / wheel_name()) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"fleet_agent"}


def test_an_admin_gets_a_one_liner_with_a_fresh_secret_and_a_viewer_does_not(
        client, django_user_model):
    viewer = django_user_model.objects.create_user("v", password="pw")
    client.force_login(viewer)
    assert client.post("/agent/add-host/", {"name": "rack 12"}).status_code == 403

    admin = django_user_model.objects.create_user("a", password="pw")
    set_role(admin, "admin")
    client.force_login(admin)
    response = client.post("/agent/add-host/", {"name": "rack 12"})

    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    secret = page.split("printf '%s\\n' '")[1].split("'")[0]
    assert EnrollmentSecret.match(secret).name == "rack 12"
    assert "/agent/install.sh | sudo" in response.content.decode()


def test_the_served_script_embeds_the_sha256_of_the_served_wheel(client, settings, built_var):
    """Issue 16 item 12: the installer checks the wheel against this digest."""
    import hashlib
    import re

    settings.VAR_DIR = built_var
    script = client.get("/agent/install.sh").content.decode()
    wheel = b"".join(client.get(f"/agent/dist/{wheel_name()}").streaming_content)
    [embedded] = re.findall(r'^WHEEL_SHA256="([0-9a-f]{64})"$', script, re.M)
    assert embedded == hashlib.sha256(wheel).hexdigest()
    assert "__AGENT_WHEEL_SHA256__" not in script


def test_the_image_builds_the_agent_wheel_before_dropping_root():
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text().splitlines()
    build = next(i for i, line in enumerate(lines)
                 if line.startswith("RUN") and "build_agent_wheel" in line)
    assert build < next(i for i, line in enumerate(lines) if line.startswith("USER"))
