"""The upstream watch against a fake GitHub API (a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from alerts.models import AlertChannel, Delivery
from audit import upstream
from audit.models import Rule, UpstreamReference
from audit.rulebook import sync_rules

pytestmark = pytest.mark.django_db

PATH_RE = re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)$")


class FakeGitHub:
    """Issues by (repo, number); every issue is open unless ``close()``-d. Records requests."""

    def __init__(self) -> None:
        self.closed: dict[tuple[str, int], str] = {}
        self.requests: list[tuple[str, str | None, str | None]] = []
        self.limit_after: int | None = None

    def close(self, repo: str, number: int, when: str) -> None:
        self.closed[(repo, number)] = when

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        match = PATH_RE.match(handler.path)
        self.requests.append((handler.path, handler.headers.get("If-None-Match"),
                              handler.headers.get("Authorization")))
        if self.limit_after is not None and len(self.requests) > self.limit_after:
            return self._send(handler, 403, {"message": "API rate limit exceeded"},
                              {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4102444800"})
        if not match:
            return self._send(handler, 404, {"message": "Not Found"})
        key = (match.group(1), int(match.group(2)))
        closed = self.closed.get(key)
        etag = f'"{key[1]}-{closed or "open"}"'
        if handler.headers.get("If-None-Match") == etag:
            return self._send(handler, 304, None, {"ETag": etag})
        body = {"number": key[1], "state": "closed" if closed else "open", "closed_at": closed}
        self._send(handler, 200, body, {"ETag": etag, "X-RateLimit-Remaining": "4999"})

    @staticmethod
    def _send(handler, status, body, headers=None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@pytest.fixture
def github(settings):
    fake = FakeGitHub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            fake.answer(self)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.AUDIT_UPSTREAM_WATCH = True
    settings.AUDIT_UPSTREAM_API_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.GITHUB_TOKEN = None
    settings.AUDIT_RULES_DIR = None
    settings.AUDIT_KB_DIR = "/nonexistent-kb-dir"
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def cited_issue(db):
    """(rule, repo, number) of a rule citing a vllm-project/vllm issue."""
    sync_rules()
    for rule in Rule.objects.filter(active=True).order_by("rule_id"):
        for url in rule.references:
            match = re.match(r"https://github\.com/(vllm-project/vllm)/issues/(\d+)$", url)
            if match:
                return rule, match.group(1), int(match.group(2))
    raise AssertionError("no rule cites a vllm-project/vllm issue")


@pytest.fixture
def admins(db):
    return AlertChannel.objects.create(kind="email", name="admins",
                                       destination="ops@example.com", min_severity="high")


def test_the_watch_is_off_by_default_and_asks_nothing(settings, github):
    settings.AUDIT_UPSTREAM_WATCH = False

    run = upstream.run_watch()

    assert run.stopped.startswith("disabled") and github.requests == []


def test_a_closed_issue_marks_the_rule_and_alerts_once(github, cited_issue, admins, client):
    rule, repo, number = cited_issue
    github.close(repo, number, "2026-11-30T10:00:00Z")

    first = upstream.run_watch()

    assert first.changed == 1 and first.alerts == 1 and not first.stopped
    assert first.checked == UpstreamReference.objects.count() > 1
    delivery = Delivery.objects.get()
    assert delivery.trigger == "knowledge_base"
    assert f"vllm#{number} closed on 2026-11-30: re-verify" in delivery.message["title"]
    assert rule.rule_id in delivery.message["title"]

    second = upstream.run_watch()

    assert second.not_modified == second.checked and second.alerts == 0
    assert Delivery.objects.count() == 1
    assert all(etag for _path, etag, _auth in github.requests[first.checked:])

    from django.contrib.auth import get_user_model

    from fleet.access import set_role
    user = get_user_model().objects.create_user("watch-viewer")
    set_role(user, "viewer")
    client.force_login(user)
    page = client.get("/kb/").content.decode()
    row = page.split(f'data-rule="{rule.rule_id}"')[1].split("</tr>")[0]
    assert f"upstream changed, re-verify: vllm#{number} closed 2026-11-30" in row


def test_a_close_before_the_rule_was_verified_is_not_a_change_to_re_verify(github, cited_issue,
                                                                          admins):
    rule, repo, number = cited_issue
    github.close(repo, number, "2020-01-01T00:00:00Z")

    run = upstream.run_watch()

    assert run.changed == 1 and run.alerts == 0
    assert not Delivery.objects.exists()


def test_a_rate_limit_stops_the_run_and_pauses_the_next(github, cited_issue, settings):
    from django.core.cache import cache

    github.limit_after = 2

    run = upstream.run_watch()

    assert run.stopped.startswith("rate limited") and len(github.requests) == 3
    assert cache.get(upstream.PAUSE_KEY) == 4102444800
    again = upstream.run_watch()
    assert again.stopped.startswith("rate limited until") and len(github.requests) == 3


def test_a_github_token_is_sent_when_configured(github, cited_issue, settings):
    settings.GITHUB_TOKEN = "ghp_test_only"  # noqa: S105
    github.limit_after = 0

    upstream.run_watch()

    assert github.requests[0][2] == "Bearer ghp_test_only"


def test_the_beat_schedule_has_no_watch_unless_opted_in():
    from django.conf import settings

    assert settings.AUDIT_UPSTREAM_WATCH is False
    assert "watch-upstream" not in settings.CELERY_BEAT_SCHEDULE
