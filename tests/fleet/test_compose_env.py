"""docker-compose.yml and .env.example stay in step with the settings (no Docker here)."""

from __future__ import annotations

from pathlib import Path

import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
APP_SERVICES = ("web", "worker", "beat")


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_runs_db_redis_web_worker_and_beat_with_health_checks():
    services = compose()["services"]
    assert set(services) >= {"db", "redis", "web", "worker", "beat"}
    for name, service in services.items():
        if name == "migrate":  # one-shot: its exit status is what the others wait for
            assert service["healthcheck"] == {"disable": True}
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_web_worker_and_beat_share_one_image_and_wait_for_healthy_services():
    services = compose()["services"]
    assert len({services[name]["image"] for name in APP_SERVICES}) == 1
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["db"]["condition"] == depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert "gunicorn" in services["web"]["command"]
    assert "migrate" not in " ".join(services["web"]["command"])  # the one-shot's job
    assert "worker" in services["worker"]["command"] and "beat" in services["beat"]["command"]


def test_every_variable_compose_sets_for_the_app_is_one_the_settings_read():
    for name in (*APP_SERVICES, "migrate"):
        names = {v.removesuffix("_FILE") for v in compose()["services"][name]["environment"]}
        unknown = names - set(settings.ENV_VARS_READ)
        assert not unknown, f"{name} sets variables the settings never read: {unknown}"


def test_env_example_lists_exactly_the_variables_the_settings_read():
    lines = (ROOT / ".env.example").read_text().splitlines()
    listed = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    assert listed == set(settings.ENV_VARS_READ)


def test_only_the_buffering_tls_proxy_is_published_and_it_has_body_read_timeouts():
    """A slow body must meet the proxy, never a gunicorn sync worker."""
    services = compose()["services"]
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"proxy"}  # not the database, not Redis, not gunicorn
    assert "443:443" in services["proxy"]["ports"]
    assert services["web"]["environment"]["BEHIND_PROXY"] == "true"
    assert services["web"]["environment"]["SITE_URL"].split(":-", 1)[1].startswith("https://")
    mounts = [v.split(":")[0] for v in services["proxy"]["volumes"]]
    caddyfile = (ROOT / mounts[mounts.index("./deploy/Caddyfile")]).read_text()
    directives = {line.split()[0]: line.split()[1:] for line in caddyfile.splitlines()
                  if line.strip() and not line.strip().startswith("#")}
    assert directives["read_body"] and directives["read_header"]
    assert directives["request_buffers"] == ["unlimited"]  # whole body before a worker
    assert directives["max_size"] == ["4200KB"]  # the 4 MiB report cap and gzip's overhead
    assert directives["respond"][0] == "@over_cap"  # refused by the proxy, never a 502
    assert directives["reverse_proxy"][0] == "web:8000"
    assert "header_up X-Real-IP {remote_host}" in caddyfile  # read by the login throttle


def test_the_app_services_read_env_and_make_test_has_its_own_services():
    """.env reaches web/worker/beat; the README's `make test` services are the loopback-only
    test file's, never the production stack's database."""
    services = compose()["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["env_file"] == [{"path": ".env", "required": False}]
    readme = (ROOT / "README.md").read_text()
    assert "docker compose -f deploy/compose/test-services.yml up -d" in readme
    test_services = yaml.safe_load((ROOT / "deploy/compose/test-services.yml").read_text())
    for service in test_services["services"].values():
        assert all(str(p).startswith("127.0.0.1:") for p in service["ports"])


def test_secrets_come_from_files_and_the_app_role_is_no_superuser():
    data = compose()
    services = data["services"]
    for name in (*APP_SERVICES, "migrate"):
        env = services[name]["environment"]
        for secret in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
            assert secret not in env, f"{name} sets {secret} in plain text"
            path = env[f"{secret}_FILE"]
            assert path.removeprefix("/run/secrets/") in services[name]["secrets"]
    assert all(s["file"].startswith("./secrets/") for s in data["secrets"].values())
    db = services["db"]["environment"]
    assert "POSTGRES_PASSWORD" not in db and db["POSTGRES_PASSWORD_FILE"]
    init = (ROOT / "deploy/compose/init-app-role.sh").read_text()
    assert "CREATE ROLE fleet LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" in init
    assert "requirepass" in " ".join(services["redis"]["command"])
    assert "REDISCLI_AUTH" in services["redis"]["healthcheck"]["test"][1]


def test_migrations_run_once_in_a_one_shot_service():
    migrate = compose()["services"]["migrate"]
    assert migrate["command"][-2:] == ["migrate", "--noinput"]
    assert migrate["restart"] == "no"
    assert "migrate" not in migrate["depends_on"]


def test_the_compose_version_it_needs_is_stated():
    assert "Compose >= 2.24" in (ROOT / "docker-compose.yml").read_text()


def test_make_secrets_writes_private_consistent_files_once(tmp_path):
    import shutil
    import stat
    import subprocess

    (tmp_path / "deploy/compose").mkdir(parents=True)
    script = tmp_path / "deploy/compose/make-secrets.sh"
    shutil.copy(ROOT / "deploy/compose/make-secrets.sh", script)
    subprocess.run(["sh", str(script)], check=True, capture_output=True, timeout=60)
    folder = tmp_path / "secrets"
    first = {p.name: p.read_text() for p in folder.iterdir()}
    assert set(first) == set(compose()["secrets"])
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert first["database_url"].strip() == (
        f"postgres://fleet:{first['db_password'].strip()}@db:5432/fleet_audit")
    assert first["redis_url"].strip() == f"redis://:{first['redis_password'].strip()}@redis:6379/0"
    subprocess.run(["sh", str(script)], check=True, capture_output=True, timeout=60)
    assert {p.name: p.read_text() for p in folder.iterdir()} == first  # kept on a re-run


def test_the_web_image_installs_pinned_hashes_on_a_digest_pinned_base():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes -r server-requirements.lock" in dockerfile
    assert "pip install --no-deps ." in dockerfile
    assert "'.[server]'" not in dockerfile
    import re
    assert re.search(r"ARG PYTHON_IMAGE=\S+@sha256:[0-9a-f]{64}\n", dockerfile)
    lock = (ROOT / "server-requirements.lock").read_text()
    for package in ("django==", "celery==", "gunicorn==", "psycopg=="):
        assert package in lock
    entries = re.findall(r"^([a-z0-9][a-z0-9._-]*)==\S+", lock, re.M)
    hashed = re.findall(r"^[a-z0-9][a-z0-9._-]*==[^\n]*\\\n\s+--hash=sha256:", lock, re.M)
    assert entries and len(hashed) == len(entries)
