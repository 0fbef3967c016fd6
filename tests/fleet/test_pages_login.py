"""Pages need a login (a crawler over every URL pattern) and escape what agents send."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.urls import URLPattern, URLResolver, get_resolver

from fleet.models import Host

pytestmark = pytest.mark.django_db

#: Agent-facing paths that authenticate with host tokens (or serve the installer), not logins.
PUBLIC_PREFIXES = ("/api/", "/agent/install.sh", "/agent/dist/", "/static/",
                   "/accounts/login/", "/accounts/logout/", "/admin/login/",
                   "/metrics",  # Prometheus' bearer token: tests/dashboard/test_prometheus.py
                   "/favicon.ico")  # a redirect to the static icon, public like /static/
SAMPLE_ARGS = {"int": "1", "uuid": str(uuid.uuid4()), "slug": "x", "str": "x", "path": "x"}


def walk(patterns: list, prefix: str = "") -> Iterator[str]:
    """Every concrete path the URLconf can route, with sample values for converters."""
    for entry in patterns:
        route = str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + route)
        elif isinstance(entry, URLPattern):
            yield "/" + _fill(prefix + route)


def _fill(route: str) -> str:
    import re

    route = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLE_ARGS.get(m.group(1) or "str", "x"),
                   route)
    # admin routes are regexes: replace groups with a sample value, drop anchors
    route = re.sub(r"\(\?P<\w+>[^)]*\)", "1", route)
    return route.replace("^", "").replace("$", "").replace("\\", "")


def test_every_page_redirects_anonymous_users_to_a_login(client):
    paths = sorted(set(walk(get_resolver().url_patterns)))
    checked = 0
    for path in paths:
        if path.startswith(PUBLIC_PREFIXES):
            continue
        response = client.get(path, follow=True)
        assert response.redirect_chain, f"{path} answered {response.status_code} without login"
        final = response.redirect_chain[-1][0]
        assert "/login/" in final, (path, final)
        assert response.status_code == 200, path
        checked += 1
    assert checked >= 3  # at least the hosts list, a host page and the admin


def test_the_hosts_list_shows_each_host_for_a_signed_in_user(client, post_report, make_report,
                                                             enrolled):
    _, token = enrolled()
    post_report(make_report(), token=token)
    user = get_user_model().objects.create_user("ops", password="pw-for-tests")
    client.force_login(user)
    page = client.get("/").content.decode()
    assert "gpu-node-1" in page and "0.25.1" in page and "1x NVIDIA H100 80GB HBM3" in page
    assert " s ago" in page


def test_the_host_page_lists_servers_with_raw_argv_and_template_hash(
        client, post_report, make_report, enrolled):
    host, token = enrolled()
    post_report(make_report(), token=token)
    client.force_login(get_user_model().objects.create_user("ops", password="pw-for-tests"))
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "vllm serve google/gemma-4-31B-it --max-model-len 65536" in page
    assert "a" * 64 in page


def test_a_hostname_with_a_script_tag_is_rendered_escaped(client, post_report, make_report,
                                                         enrolled):
    evil = "<script>alert(1)</script>"
    host, token = enrolled(hostname=evil)  # printable: enrollment accepts it
    post_report(make_report(host={"hostname": evil}, server={"argv": ["vllm", evil]}),
                token=token)
    assert Host.objects.get().hostname == evil
    client.force_login(get_user_model().objects.create_user("ops", password="pw-for-tests"))
    for path in ("/", f"/hosts/{host.code}/"):
        page = client.get(path).content.decode()
        assert evil not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
