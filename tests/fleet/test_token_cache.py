"""The ingest's token cache (fleet.token_cache): a live token's lookup is reused while
the shared token epoch is unchanged, for at most INGEST_TOKEN_CACHE_S seconds; a revocation
takes effect at the next request (through the models) or within that bound (bulk updates)."""

from __future__ import annotations

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import ratelimit, token_cache
from fleet.models import AgentToken, Host, ProbePolicy, Report

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):
    """A settable monotonic clock for the cache."""
    now = [1000.0]
    monkeypatch.setattr(token_cache.time, "monotonic", lambda: now[0])
    return now


def _token_queries(post) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert post().status_code == 202
    return sum('FROM "fleet_agenttoken"' in q["sql"] for q in queries.captured_queries)


def test_a_steady_agent_is_looked_up_once_per_ttl(post_report, make_report, enrolled, clock,
                                                 settings):
    settings.INGEST_TOKEN_CACHE_S = 300
    _, token = enrolled()
    post = lambda: post_report(make_report(), token=token)  # noqa: E731
    assert _token_queries(post) == 1
    clock[0] += 299
    assert _token_queries(post) == 0  # reused
    clock[0] += 1
    assert _token_queries(post) == 1  # expired: asked again


def test_the_cache_can_be_turned_off(post_report, make_report, enrolled, settings):
    settings.INGEST_TOKEN_CACHE_S = 0
    _, token = enrolled()
    post = lambda: post_report(make_report(), token=token)  # noqa: E731
    assert _token_queries(post) == 1
    assert _token_queries(post) == 1


def test_a_revocation_saved_by_another_worker_is_refused_at_the_next_request(
        post_report, make_report, enrolled, clock, django_capture_on_commit_callbacks):
    host, token = enrolled()
    assert post_report(make_report(), token=token).status_code == 202
    cached = token_cache._entries.copy()
    with django_capture_on_commit_callbacks(execute=True):
        AgentToken.objects.get(host=host).revoke()  # bumps the shared epoch on commit
    token_cache._entries.update(cached)  # this worker did not see the signal
    assert post_report(make_report(), token=token).status_code == 401


def test_a_bulk_revocation_without_signals_is_refused_within_the_ttl(
        post_report, make_report, enrolled, clock, settings):
    settings.INGEST_TOKEN_CACHE_S = 300
    host, token = enrolled()
    assert post_report(make_report(), token=token).status_code == 202
    AgentToken.objects.filter(host=host).update(revoked_at=timezone.now())  # no signal
    clock[0] += 299
    assert post_report(make_report(), token=token).status_code == 202  # the documented bound
    clock[0] += 1
    assert post_report(make_report(), token=token).status_code == 401
    assert Report.objects.count() == 2


def test_nothing_is_cached_while_the_cache_does_not_answer(post_report, make_report, enrolled,
                                                          monkeypatch):
    _, token = enrolled()

    class Down:
        def __getattr__(self, name):
            raise redis.ConnectionError("redis down")

    monkeypatch.setattr(ratelimit, "redis_client", Down)  # the rate limiter fails open too
    post = lambda: post_report(make_report(), token=token)  # noqa: E731
    assert _token_queries(post) == 1
    assert _token_queries(post) == 1
    assert token_cache._entries == {}


def test_a_revocation_in_this_process_is_refused_at_once(post_report, make_report, enrolled,
                                                        clock):
    host, token = enrolled()
    assert post_report(make_report(), token=token).status_code == 202
    AgentToken.objects.get(host=host).revoke()
    assert post_report(make_report(), token=token).status_code == 401


def test_a_revoked_secret_refuses_its_cached_tokens(post_report, make_report, enrolled, clock):
    from fleet.models import EnrollmentSecret

    host, token = enrolled()
    secret, _ = EnrollmentSecret.create(name="rack")
    AgentToken.objects.filter(host=host).update(secret=secret)
    assert post_report(make_report(), token=token).status_code == 202
    secret.revoke()
    assert post_report(make_report(), token=token).status_code == 401


def test_a_re_enrolled_host_is_served_with_its_new_token_at_once(
        post_report, make_report, enrolled, clock):
    host, old = enrolled()
    assert post_report(make_report(), token=old).status_code == 202
    pending, new = AgentToken.issue(host, pending=True)
    assert post_report(make_report(), token=new).status_code == 403  # awaits approval
    pending.approve()  # revokes the old token
    assert post_report(make_report(), token=new).status_code == 202
    assert post_report(make_report(), token=old).status_code == 401


@pytest.mark.django_db(transaction=True)  # ingest's autocommitted INSERT checks the host FK
def test_a_deleted_host_with_a_cached_token_gets_401_not_500(
        post_report, make_report, enrolled, clock):
    host, token = enrolled()
    assert post_report(make_report(), token=token).status_code == 202
    cached = token_cache._entries.copy()
    Host.objects.filter(pk=host.pk).delete()
    token_cache._entries.update(cached)  # as in a worker that did not see the delete
    response = post_report(make_report(), token=token)
    assert response.status_code == 401
    assert response.json()["error"]
    assert Report.objects.count() == 0


def test_enabling_probes_is_seen_by_the_next_report(post_report, make_report, enrolled, clock):
    host, token = enrolled()
    assert "probes" not in post_report(make_report(), token=token).json()
    ProbePolicy.objects.create(host=host, names=["stream_control_tokens"], interval_s=3600)
    assert post_report(make_report(), token=token).json()["probes"]
