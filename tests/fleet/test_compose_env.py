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
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_web_worker_and_beat_share_one_image_and_wait_for_healthy_services():
    services = compose()["services"]
    assert len({services[name]["image"] for name in APP_SERVICES}) == 1
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["db"]["condition"] == depends["redis"]["condition"] == "service_healthy"
    assert "gunicorn" in services["web"]["command"]
    assert "worker" in services["worker"]["command"] and "beat" in services["beat"]["command"]


def test_every_variable_compose_sets_for_the_app_is_one_the_settings_read():
    for name in APP_SERVICES:
        unknown = set(compose()["services"][name]["environment"]) - set(settings.ENV_VARS_READ)
        assert not unknown, f"{name} sets variables the settings never read: {unknown}"


def test_env_example_lists_exactly_the_variables_the_settings_read():
    lines = (ROOT / ".env.example").read_text().splitlines()
    listed = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    assert listed == set(settings.ENV_VARS_READ)


def test_only_the_buffering_tls_proxy_is_published_and_it_has_body_read_timeouts():
    """Issue 16 item 8: a slow body must meet the proxy, never a gunicorn sync worker."""
    services = compose()["services"]
    published = {name for name, service in services.items() if service.get("ports")
                 and name not in ("db", "redis")}
    assert published == {"proxy"}
    for name in ("db", "redis"):  # only on loopback, for `make test`
        assert all(str(p).startswith("127.0.0.1:") for p in services[name]["ports"]), name
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


def test_the_app_services_read_env_and_make_test_can_use_the_compose_database():
    """Issue 13.3: .env reaches web/worker/beat, and the README's `make test` URL for the
    compose database names compose's own role, password and database."""
    import re
    from pathlib import Path

    services = compose()["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["env_file"] == [{"path": ".env", "required": False}]
    db = services["db"]["environment"]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    url = re.search(r"TEST_DATABASE_URL=(postgres://\S+?)`", readme).group(1)
    assert url == (f"postgres://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}"
                   f"@127.0.0.1:5432/{db['POSTGRES_DB']}")
