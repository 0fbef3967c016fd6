"""The dashboard serves the agent installer and wheel to nodes without a login."""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import urllib.request
import zipfile
from pathlib import Path

import pytest

from fleet.access import set_role
from fleet.agent_dist import build_agent_wheel, lock_name, wheel_name
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
    """The installer checks the wheel against this digest."""
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


def test_the_served_script_embeds_the_sha256_of_the_served_lock(client, settings, built_var):
    """The dependency lock travels like the wheel, digest in the script."""
    import hashlib
    import re

    settings.VAR_DIR = built_var
    script = client.get("/agent/install.sh").content.decode()
    [name] = re.findall(r'^LOCK="([^"]+)"$', script, re.M)
    response = client.get(f"/agent/dist/{name}")
    assert response.status_code == 200
    lock = b"".join(response.streaming_content)
    assert lock == (Path(settings.BASE_DIR) / "fleet_agent" / "requirements.lock").read_bytes()
    [embedded] = re.findall(r'^LOCK_SHA256="([0-9a-f]{64})"$', script, re.M)
    assert embedded == hashlib.sha256(lock).hexdigest()


def test_a_dashboard_without_the_lock_serves_no_install_script(client, settings, tmp_path,
                                                               built_var):
    settings.VAR_DIR = tmp_path
    (tmp_path / "dist").mkdir()
    shutil.copy(built_var / "dist" / wheel_name(), tmp_path / "dist")

    response = client.get("/agent/install.sh")

    assert response.status_code == 503
    assert "build_agent_wheel" in response.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("tamper", [False, True], ids=["intact", "tampered-lock"])
def test_the_served_installer_refuses_a_lock_changed_after_it_was_served(
        tamper, live_server, settings, tmp_path, built_var):
    """Black box: the script from a live dashboard, real curl, a lock swapped on the server."""
    if shutil.which("curl") is None:
        raise AssertionError("curl missing: apt-get install -y curl")
    settings.SITE_URL = live_server.url
    settings.VAR_DIR = tmp_path / "var"
    shutil.copytree(built_var / "dist", tmp_path / "var" / "dist")
    script = tmp_path / "install.sh"
    with urllib.request.urlopen(f"{live_server.url}/agent/install.sh", timeout=30) as response:
        script.write_bytes(response.read())
    if tamper:  # e.g. a compromised mirror adding a package whose hash it controls
        with (tmp_path / "var" / "dist" / lock_name()).open("a") as lock:
            lock.write("evil==6.6.6 \\\n    --hash=sha256:" + "0" * 64 + "\n")

    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=120,
                         env={"PATH": os.environ["PATH"], "DRY_RUN": "1",
                              "PREFIX": str(tmp_path / "root"),
                              "FLEET_ENROLL_SECRET": "fes_test"})

    if tamper:
        assert out.returncode == 1
        assert f"sha256 mismatch for {lock_name()}" in out.stderr
        assert "pip" not in out.stdout and not (tmp_path / "root").exists()
    else:
        assert out.returncode == 0, out.stderr
        assert "dependency lock sha256 verified" in out.stderr
        assert "--require-hashes --only-binary :all: -r " in out.stdout


def test_the_image_ships_the_lock_next_to_the_wheel():
    """The Dockerfile's build_agent_wheel copies fleet_agent/requirements.lock into var/dist:
    the checkout's lock must reach the image (COPY before that RUN, not in .dockerignore)."""
    import fnmatch

    base = Path(__file__).resolve().parents[2]
    lines = (base / "Dockerfile").read_text().splitlines()
    build = next(i for i, line in enumerate(lines)
                 if line.startswith("RUN") and "build_agent_wheel" in line)
    assert any(line.split()[:2] in (["COPY", "."], ["COPY", "fleet_agent"])
               for line in lines[:build] if line.startswith("COPY"))
    ignored = [p.strip() for p in (base / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    lock = "fleet_agent/requirements.lock"
    assert (base / lock).is_file()
    assert not any(fnmatch.fnmatch(lock, p) or fnmatch.fnmatch(lock, p.rstrip("/") + "/*")
                   for p in ignored)


def test_building_the_wheel_puts_the_lock_next_to_it(built_var, settings):
    assert (built_var / "dist" / lock_name()).read_bytes() == (
        Path(settings.BASE_DIR) / "fleet_agent" / "requirements.lock").read_bytes()
