"""Production settings pass ``check --deploy``; CSP, proxy trust and no-store (item 18)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {"DEBUG": "false", "SITE_URL": "https://fleet.example.com",
              "ALLOWED_HOSTS": "fleet.example.com", "BEHIND_PROXY": "true",
              "SECRET_KEY": "k" * 20 + "Zq8#mW2!pR7$vL4^xT9&cN3*bH6(jF1)"}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120, check=False)


def _settings(env: dict[str, str]) -> dict:
    code = ("import django, json; django.setup(); from django.conf import settings as s; "
            "print(json.dumps({k: getattr(s, k, None) for k in ('SECURE_PROXY_SSL_HEADER', "
            "'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', 'SESSION_COOKIE_SECURE', "
            "'CSRF_COOKIE_SECURE')}))")
    done = _run({**env, "DJANGO_SETTINGS_MODULE": "config.settings"}, "-c", code)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_check_deploy_is_clean_with_production_settings_behind_the_proxy():
    done = _run(PRODUCTION, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_warns_when_https_is_not_behind_the_proxy():
    done = _run({**PRODUCTION, "BEHIND_PROXY": "false"}, "manage.py", "check", "--deploy")
    assert "fleet.W001" in done.stdout + done.stderr
    assert "Caddy" in done.stdout + done.stderr  # the proxy compose runs (no nginx there)
    assert "nginx" not in done.stdout + done.stderr


def test_proxy_headers_are_trusted_only_when_the_setting_says_so():
    assert _settings({**PRODUCTION, "BEHIND_PROXY": "false"})["SECURE_PROXY_SSL_HEADER"] is None
    behind = _settings(PRODUCTION)
    assert behind["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert behind["SECURE_SSL_REDIRECT"] and behind["SECURE_HSTS_SECONDS"] >= 31_536_000
    assert behind["SESSION_COOKIE_SECURE"] and behind["CSRF_COOKIE_SECURE"]
    plain = _settings({**PRODUCTION, "SITE_URL": "http://127.0.0.1:8000"})
    assert not plain["SECURE_SSL_REDIRECT"] and plain["SECURE_HSTS_SECONDS"] == 0


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I), "inline script"),
    (re.compile(r"\sstyle=[\"']", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+=[\"']", re.I), "event handler attribute"),
    (re.compile(r"<style[\s>]", re.I), "style element"),
]


def test_no_template_carries_what_the_policy_blocks():
    found = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        if "alerts/email" in path.as_posix():
            continue  # emails are not served under the page policy
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {what}" for rx, what in INLINE if rx.search(text)]
    assert found == []


@pytest.mark.django_db
def test_every_page_carries_the_content_security_policy(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("v", password="x"))
    for path in ("/", "/findings/", "/accounts/login/", "/api/v1/health"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "unsafe-inline" not in policy


@pytest.mark.django_db
def test_pages_that_show_a_secret_once_are_not_stored(client, django_user_model):
    from fleet.access import set_role

    admin = django_user_model.objects.create_user("a", password="x")
    set_role(admin, "admin")
    client.force_login(admin)
    for answer in (client.post("/settings/secrets/", {"name": "rack-1"}),
                   client.post("/agent/add-host/", {"name": "rack-2"})):
        assert answer.status_code == 200
        assert "no-store" in answer["Cache-Control"]
