"""Settings come from the environment only, strictly, and fail naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_rate

ROOT = Path(__file__).resolve().parents[2]


def run_manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value", ["1", "yes", "True ", "on"])
def test_a_boolean_other_than_true_or_false_is_refused_naming_it(monkeypatch, value):
    monkeypatch.setenv("SOME_FLAG", value)
    if value.strip().lower() in ("true", "false"):
        assert env_bool("SOME_FLAG", False) is True
        return
    with pytest.raises(ImproperlyConfigured, match="SOME_FLAG"):
        env_bool("SOME_FLAG", False)


def test_integers_and_rates_are_checked(monkeypatch):
    monkeypatch.setenv("HOURS", "-1")
    with pytest.raises(ImproperlyConfigured, match="HOURS"):
        env_int("HOURS", 48, minimum=1)
    monkeypatch.setenv("RATE", "1/5s")
    assert env_rate("RATE", "1/m") == (1, 5)
    monkeypatch.setenv("RATE", "10/m")
    assert env_rate("RATE", "1/m") == (10, 60)
    monkeypatch.setenv("RATE", "fast")
    with pytest.raises(ImproperlyConfigured, match="RATE"):
        env_rate("RATE", "1/m")


def test_a_fresh_clone_without_any_environment_runs_commands_but_flags_the_secret():
    result = run_manage({}, "check")
    assert result.returncode != 0
    assert "fleet.E001" in result.stderr and "SECRET_KEY" in result.stderr


def test_the_env_example_placeholder_secret_key_is_refused_like_a_missing_one():
    """Copying .env.example unchanged must not pass ``check``."""
    from pathlib import Path

    example = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    placeholder = next(line.split("=", 1)[1] for line in example.splitlines()
                       if line.startswith("SECRET_KEY="))
    result = run_manage({"SECRET_KEY": placeholder}, "check")
    assert result.returncode != 0
    assert "fleet.E002" in result.stderr and "placeholder" in result.stderr
    assert run_manage({"SECRET_KEY": "x" * 50}, "check").returncode == 0


def test_debug_true_needs_no_secret_key():
    result = run_manage({"DEBUG": "true"}, "check")
    assert result.returncode == 0, result.stderr


def test_a_wrong_boolean_stops_the_start_naming_the_variable():
    result = run_manage({"DEBUG": "yes"}, "check")
    assert result.returncode != 0
    assert "DEBUG must be 'true' or 'false'" in result.stderr


def test_serving_refuses_to_start_without_a_secret_key():
    code = "import config.wsgi"
    clean = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_without_redis_celery_runs_tasks_in_process():
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
            "django.setup(); from config.celery import app; "
            "print(app.conf.task_always_eager, app.conf.task_serializer, "
            "sorted(app.conf.accept_content))")
    clean = {"PATH": os.environ["PATH"], "HOME": "/tmp", "DEBUG": "true"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["True", "json", "['json']"], result.stderr


@pytest.mark.parametrize(("variable", "value"), [
    ("DATABASE_URL", "foo://x"), ("REDIS_URL", "http://x"), ("SITE_URL", "example.com"),
    ("INGEST_RATE", "fast"), ("INGEST_BURST", "many"), ("REPORT_RETENTION_HOURS", "0"),
    ("LOG_LEVEL", "loud"), ("CELERY_VISIBILITY_TIMEOUT_MINUTES", "soon"),
])
def test_a_malformed_value_stops_the_start_naming_the_variable(variable, value):
    result = run_manage({"DEBUG": "true", variable: value}, "check")
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {variable}" in result.stderr


def test_a_secret_can_come_from_a_file_as_compose_secrets_mount_it(tmp_path):
    key = tmp_path / "secret_key"
    key.write_text("k" * 50 + "\n")
    assert run_manage({"SECRET_KEY_FILE": str(key)}, "check").returncode == 0
    url = tmp_path / "database_url"
    url.write_text("postgres://fleet:s3cret@db:5432/fleet_audit\n")
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
            "django.setup(); from django.conf import settings as s; "
            "print(s.DATABASES['default']['PASSWORD'], 'DATABASE_URL_FILE' in s.ENV_VARS_READ)")
    clean = {"PATH": os.environ["PATH"], "HOME": "/tmp", "DEBUG": "true",
             "DATABASE_URL_FILE": str(url)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["s3cret", "False"], result.stderr
    missing = run_manage({"SECRET_KEY_FILE": str(tmp_path / "absent")}, "check")
    assert missing.returncode != 0 and "SECRET_KEY_FILE: cannot read" in missing.stderr
