"""PostgreSQL restarts during ingest: the API answers 503 with Retry-After while it is
down, the real agent spools, and after it returns every report is stored once, in order.

A private cluster (initdb on a random port) is used, never the machine's shared one.
"""

from __future__ import annotations

import gzip
import json

import httpx
import psycopg
import pytest
from faultkit import FAKE_MACHINE_ID, WAIT_S, run_django, server_env, wait_for

from fleet_agent import config as agent_config

pytestmark = [pytest.mark.slow]

SETUP = ("from django.core.management import call_command\n"
         "call_command('migrate', verbosity=0)\n"
         "call_command('create_enrollment_secret', 'fault-tests')\n")


def _conninfo(url: str) -> str:
    return url.replace("postgres://", "postgresql://")


def _stored(url: str) -> list[str]:
    """report_ids in arrival order; [] while the database is unreachable."""
    try:
        with psycopg.connect(_conninfo(url), connect_timeout=3) as conn:
            rows = conn.execute("SELECT report_id FROM fleet_report ORDER BY id").fetchall()
    except psycopg.OperationalError:
        return []
    return [str(row[0]) for row in rows]


def _post(url: str, token: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/api/v1/reports", content=gzip.compress(json.dumps(body).encode()),
                      headers={"Authorization": f"Bearer {token}",
                               "Content-Type": "application/json", "Content-Encoding": "gzip"},
                      timeout=30)


def test_a_postgres_restart_answers_503_meanwhile_and_loses_no_report(
        private_postgres, private_redis, dashboard, agent, make_report):
    with psycopg.connect(_conninfo(private_postgres.url("postgres")), autocommit=True) as conn:
        conn.execute("CREATE DATABASE fleet")
    db_url = private_postgres.url("fleet")
    secret = run_django(server_env(db_url, private_redis.url), SETUP).strip().splitlines()[-1]
    web = dashboard(db_url, private_redis.url)
    node = agent(web.url)
    node.enroll(web.url, secret)
    node.start()
    assert wait_for(lambda: len(_stored(db_url)) >= 3, WAIT_S), node.text()[-2000:]

    private_postgres.stop()
    token = agent_config.load(node.config_path).token
    probe = make_report(host={"machine_id": FAKE_MACHINE_ID, "hostname": "gpu-node-7"})
    answer = _post(web.url, token, probe)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == web.env["FAULT_RETRY_AFTER_S"]
    assert httpx.get(web.url + "/api/v1/health", timeout=30).status_code == 503
    before = len(node.created())
    assert wait_for(lambda: len(node.pending()) >= 3 and len(node.created()) >= before + 3,
                    WAIT_S), node.text()[-2000:]
    private_postgres.start()
    assert wait_for(lambda: not node.pending(), WAIT_S), node.text()[-2000:]
    node.stop()

    created, stored, left = node.created(), _stored(db_url), node.pending()
    assert stored + left == created                 # nothing lost, order kept, no probe
    assert len(stored) == len(set(stored)) >= 6
    assert probe["report_id"] not in stored          # a 503 stored nothing
