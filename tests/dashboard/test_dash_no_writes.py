"""A GET never writes (rules were mirrored on the first visit to Findings and met
the simulator's writes with "database is locked"), and the embedded SQLite default runs in
WAL mode with a busy timeout."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import Rule
from audit.rulebook import current_knowledge_base

WRITES = ("INSERT", "UPDATE", "DELETE")


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/findings/", "/kb/"])
def test_pages_read_the_rules_without_mirroring_them(client, role_user, url):
    Rule.objects.all().delete()
    client.force_login(role_user("viewer"))
    client.get("/")  # the session row is written here, not below
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(WRITES)]
    assert writes == []
    assert Rule.objects.count() == 0
    if url == "/kb/":
        assert current_knowledge_base().rules[0].id in response.content.decode()


@pytest.mark.django_db
def test_a_rule_page_answers_before_the_rules_are_mirrored(client, role_user):
    Rule.objects.all().delete()
    client.force_login(role_user("viewer"))
    rule = current_knowledge_base().rules[0]
    assert client.get(f"/kb/{rule.id}/").status_code == 200
    assert client.get("/kb/no-such-rule/").status_code == 404
    assert Rule.objects.count() == 0


def test_the_embedded_sqlite_default_uses_wal_and_a_busy_timeout(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY="test-only-not-secret",
               DEBUG="true")
    code = ("import django; django.setup(); from django.db import connection as c; "
            "k = c.cursor(); k.execute('PRAGMA journal_mode'); print(k.fetchone()[0]); "
            "k.execute('PRAGMA busy_timeout'); print(k.fetchone()[0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert out[0] == "wal"
    assert int(out[1]) >= 5000
