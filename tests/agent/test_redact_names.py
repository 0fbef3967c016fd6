"""Secrets never leave the node, whatever they are called.

Names are decided on word parts (``PGPASSWORD`` and ``GH_PAT`` are secret, ``PYTHONPATH`` and
``CUDA_VISIBLE_DEVICES`` are not), values are scanned for secret flags and ``Bearer`` tokens,
numbers under a secret name are redacted unless the name is a count, and the spool on disk is
readable by the agent's user only.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fleet_agent import redact
from fleet_agent.schema import REDACTED
from fleet_agent.spool import Spool, StateFile

LEAKED_IN_THE_ATTACK = {
    "PGPASSWORD": "pg-hunter2", "MYSQL_PWD": "my-hunter2", "SSHPASS": "ssh-hunter2",
    "GH_PAT": "ghp_abcdef123456", "HF_TOKENS": "hf_aaa,hf_bbb",
    "AUTH_HEADER": "Bearer eyJhbGciOi", "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=abc1234",
    "NUMERIC_API_KEY": "8675309867", "DATABASE_DSN": "postgres://db/x",
    "SESSION_COOKIE": "sid=1234abcd", "GITHUBTOKEN": "ghs_zzzzzz", "OAUTH_CLIENT": "c-secret",
}

USEFUL_SETTINGS = {
    "CUDA_VISIBLE_DEVICES": "0,1", "VLLM_ATTENTION_BACKEND": "FLASHINFER",
    "KV_CACHE_DTYPE": "fp8", "VLLM_KV_CACHE_LAYOUT": "HND", "TOKENIZERS_PARALLELISM": "false",
    "PYTHONPATH": "/opt/lib", "PATH": "/usr/bin", "PWD": "/srv/vllm", "OLDPWD": "/root",
    "GIT_AUTHOR_NAME": "ops", "NCCL_KEY_TIMEOUT": "30", "VLLM_MAX_TOKENS_PER_EXPERT": "4096",
    "HF_HUB_ENABLE_HF_TRANSFER": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "VLLM_USE_V1": "1", "KEYBOARD": "us", "COMPASS_HEADING": "north",
}


def test_every_name_the_attack_leaked_is_redacted() -> None:
    out = redact.redact_env(LEAKED_IN_THE_ATTACK)
    assert out == dict.fromkeys(LEAKED_IN_THE_ATTACK, REDACTED)


def test_useful_non_secret_settings_keep_their_values() -> None:
    assert redact.redact_env(USEFUL_SETTINGS) == USEFUL_SETTINGS


def test_secret_flags_inside_an_env_value_are_redacted() -> None:
    env = {"EXTRA_VLLM_ARGS": "--api-key sk-live-123456 --port 8000 --hf-token=hf_abcdefg",
           "VLLM_ARGS": "--max-num-batched-tokens 8192 --api-key='sk quoted 1'"}
    out = redact.redact_env(env)
    assert out["EXTRA_VLLM_ARGS"] == f"--api-key {REDACTED} --port 8000 --hf-token={REDACTED}"
    assert out["VLLM_ARGS"] == f"--max-num-batched-tokens 8192 --api-key='{REDACTED}'"


def test_authorization_and_bearer_values_are_redacted_anywhere() -> None:
    env = {"CURL_ARGS": '-H "Authorization: Bearer tok-987654" https://x',
           "PROBE": "Basic dXNlcjpwYXNz", "HEADERS_EXTRA": "a=1"}
    out = redact.redact_env(env)
    assert "tok-987654" not in json.dumps(out) and "dXNlcjpwYXNz" not in json.dumps(out)
    argv = redact.redact_argv(["vllm", "serve", "m", "--middleware", "Bearer abcdef123"])
    assert argv[-1] == f"Bearer {REDACTED}"


def test_a_number_under_a_secret_name_is_redacted_unless_the_name_is_a_count() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "12345678", "--max-num-batched-tokens", "8192",
            "--speculative-config", '{"num_speculative_tokens": 3, "api_key": 99887766}']
    out = redact.redact_argv(argv)
    assert out[4] == REDACTED and out[6] == "8192"
    assert json.loads(out[8]) == {"num_speculative_tokens": 3, "api_key": REDACTED}


_PART = st.text(alphabet="ABCDEFGHIJKLMNOQRUVWXYZ", min_size=1, max_size=6)
_SECRET_PART = st.sampled_from(sorted(redact.SECRET_WORDS) + ["SSHPASS", "PGPASSWORD",
                                                             "MYTOKEN", "XAPIKEY"])
_VALUE = st.one_of(st.from_regex(r"[A-Za-z0-9_\-.~+/=:]{6,30}", fullmatch=True),
                   st.integers(min_value=100000, max_value=10**12).map(str))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(before=st.lists(_PART, max_size=2), secret=_SECRET_PART,
       after=st.lists(_PART, max_size=2), value=_VALUE, sep=st.sampled_from(["_", "-", "."]))
def test_a_name_with_a_secret_word_part_never_keeps_its_value(before, secret, after, value,
                                                               sep) -> None:
    words = [w for w in before + after if w not in redact.QUANTITY_WORDS]
    name = sep.join(words[:len(before)] + [secret] + words[len(before):])
    assume(name not in ("PWD", "OLDPWD"))  # the shell's working directories
    assert redact.redact_env({name: value}) == {name: REDACTED}
    assert redact.redact_argv(["--" + name.lower(), value])[1] == REDACTED
    assert value not in redact.redact_env({"EXTRA_ARGS": f"--{name.lower()} {value} -x"})[
        "EXTRA_ARGS"]


_BENIGN = st.sampled_from(["CUDA", "VISIBLE", "DEVICES", "VLLM", "ATTENTION", "BACKEND", "KV",
                           "CACHE", "DTYPE", "NCCL", "DEBUG", "HF", "HOME", "PORT", "HOST",
                           "TOKENIZERS", "PARALLELISM", "PATH", "LOGGING", "LEVEL", "OMP"])


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(words=st.lists(_BENIGN, min_size=1, max_size=4),
       value=st.from_regex(r"[A-Za-z0-9_./]{1,20}", fullmatch=True))
def test_names_built_from_ordinary_words_keep_their_values(words, value) -> None:
    name = "_".join(words)
    assert redact.redact_env({name: value}) == {name: value}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_spool_is_private_and_an_old_world_readable_one_is_tightened(tmp_path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o755)
    os.chmod(spool_dir, 0o755)  # noqa: S103 - what an older agent left
    old = spool_dir / f"{1:020d}-00000000-0000-0000-0000-000000000000.json.gz"
    old.write_bytes(gzip.compress(b"{}"))
    os.chmod(old, 0o644)
    state = StateFile(tmp_path / "state.json")
    spool = Spool(spool_dir, 10, 10**6, state)
    new = spool.put("11111111-1111-1111-1111-111111111111", gzip.compress(b"{}"))
    state.update(spool_dropped=1)
    assert _mode(spool_dir) == 0o700
    assert (_mode(old), _mode(new), _mode(state.path)) == (0o600, 0o600, 0o600)


@pytest.mark.django_db
def test_the_dashboard_redacts_what_a_careless_agent_sends(post_report, make_report,
                                                           enrolled) -> None:
    from fleet.models import Report, Server

    _, token = enrolled()
    env = {**LEAKED_IN_THE_ATTACK, "CUDA_VISIBLE_DEVICES": "0"}
    report = make_report(server={
        "env": env, "argv": ["vllm", "serve", "m", "--api-key", "sk-live-abcdef"],
        "errors": ["GET /v1/models: 401 with Authorization: Bearer sk-live-abcdef"]})
    assert post_report(report, token=token).status_code == 202
    stored = json.dumps(Report.objects.get().raw) + json.dumps(Server.objects.get().env)
    for secret in [*LEAKED_IN_THE_ATTACK.values(), "sk-live-abcdef"]:
        assert secret not in stored
    assert Server.objects.get().env["CUDA_VISIBLE_DEVICES"] == "0"
