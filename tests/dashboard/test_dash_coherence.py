"""The host page's answers agree with each other: the capacity line is the server model's
(engine figures first), each command sits with its own server's findings, and a recommended
release the Versions page marks risky comes with the risk named."""

from __future__ import annotations

import pytest

from front.views_findings import release_risks, version_rows


@pytest.mark.django_db
def test_the_host_page_names_capacity_risk_and_keeps_commands_with_their_server(
        client, role_user, demo_fleet) -> None:
    client.force_login(role_user("viewer"))
    risky = {row["raw"] for row in version_rows() if row["state"] in ("risky", "blocked")}
    named = capacity = 0
    for host in demo_fleet["hosts"]:
        body = client.get(f"/hosts/{host.code}/").content.decode()
        capacity += "KV pool" in body  # the server model's capacity sentence
        top = body[body.index('id="what-to-do"'):body.index("<h2>Charts")]
        for group in top.split('<div class="todo-server"')[1:]:
            if "Recommended for" not in group:
                continue
            identity = group.split('data-server="', 1)[1].split('"', 1)[0]
            assert f"Recommended for <strong>{identity}</strong>" in group
            version = group.split("on vLLM <strong>", 1)[1].split("<", 1)[0]
            if version in risky:
                assert "is marked risky on the Versions page by" in group
                assert all(rule in group for rule, _ in release_risks(version))
                named += 1
    assert capacity >= 2  # the Gemma 4 hosts (the third runs a model of unknown geometry)
    assert named >= 1  # the demo's 0.25.1 is risky (streamed <turn|> leak on its configs)


@pytest.mark.django_db
def test_a_silent_hosts_what_to_do_says_it_is_silent_first(client, role_user,
                                                           demo_fleet) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from fleet.models import Host

    host = demo_fleet["hosts"][1]
    client.force_login(role_user("viewer"))
    body = client.get(f"/hosts/{host.code}/").content.decode()
    assert 'id="todo-silent"' not in body
    Host.objects.filter(pk=host.pk).update(last_seen=timezone.now() - timedelta(hours=2))
    body = client.get(f"/hosts/{host.code}/").content.decode()
    top = body[body.index('id="what-to-do"'):body.index("<h2>Charts")]
    assert 'id="todo-silent"' in top and "The agent is offline" in top
