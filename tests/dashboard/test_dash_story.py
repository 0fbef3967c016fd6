"""Pages speak words, not internal fields: rule pages render message placeholders
as words, and the recommender's diff never says "see version.reason"."""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape

from audit.rulebook import current_knowledge_base
from front.templatetags.audit_tags import placeholders_as_words


def test_placeholders_read_as_words():
    text = placeholders_as_words("vLLM {version} serving {model} at {util:.2f} on {gpu}")
    assert "{" not in text and "}" not in text
    assert "the vLLM version" in text and "the model" in text and "the util" in text


@pytest.mark.django_db
def test_a_rule_page_shows_no_raw_placeholder(client, role_user):
    client.force_login(role_user("viewer"))
    rule = next(r for r in current_knowledge_base().rules if "{version}" in r.message)
    body = client.get(f"/kb/{rule.id}/").content.decode()
    message = body.split("<dt>Message</dt>", 1)[1].split("</dd>", 1)[0]
    assert not re.search(r"\{[a-z_]+\}", message)
    assert "the vLLM version" in message


def test_the_version_row_of_the_diff_explains_itself():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
    from rkit import AWQ_31B, host_report, serve

    from advice.recommend import recommend_report

    report = host_report("NVIDIA H100 80GB HBM3", 1, serve(AWQ_31B), version="0.19.1")
    item = recommend_report(report)["servers"][0]
    rows = [d for d in item["diff"] if d["flag"] == "vLLM version"]
    assert rows and all("version.reason" not in d["reason"] for d in rows)


@pytest.mark.django_db
def test_the_host_page_names_the_model_in_words(client, role_user, demo_fleet):
    client.force_login(role_user("viewer"))
    for host in demo_fleet["hosts"]:
        body = client.get(f"/hosts/{host.code}/").content.decode()
        assert ", ?" not in body and "other," not in body
        assert "family" in body


@pytest.mark.django_db
def test_the_overview_headline_is_what_just_happened(demo_fleet):
    """A crash loop (high) heads the row before a generic critical advisory; the host still
    sorts by its worst severity."""
    from audit.models import Finding
    from fleet.models import Host
    from front.views_overview import annotate_worst

    host = demo_fleet["hosts"][0]
    template = Finding.objects.filter(host=host).first()
    server = template.server
    Finding.objects.filter(host=host).delete()
    common = {"host": host, "server": server, "message": "m", "status": "open"}
    Finding.objects.create(rule_id="generic-advice", kind="pitfall", severity="critical",
                           title="Generic advisory", **common)
    Finding.objects.create(rule_id="crash-loop", kind="known_issue", severity="high",
                           title="The server is crash-looping", **common)
    row = annotate_worst(Host.objects.filter(pk=host.pk)).get()
    assert row.worst_title == "The server is crash-looping"
    assert row.worst_rank == 4  # critical still ranks the host


@pytest.mark.django_db
def test_the_host_page_opens_with_what_to_do(client, role_user, demo_fleet):
    """The recommended command and the three findings that matter come first,
    before the charts and the per-server cards."""
    from audit.models import Finding

    client.force_login(role_user("viewer"))
    shown = 0
    for host in demo_fleet["hosts"]:
        body = client.get(f"/hosts/{host.code}/").content.decode()
        top = body[body.index('id="what-to-do"'):body.index("<h2>Charts")]
        worst = (Finding.objects.filter(host=host).exclude(status="resolved")
                 .order_by("-first_seen"))
        titles = [f.title for f in worst]
        listed = top.count('<li><span class="sev')
        assert listed == min(3, len(titles))
        if titles:  # as the page writes them (HTML-escaped: titles quote <tokens>)
            assert any(escape(t) in top for t in titles)
        shown += top.count("vllm serve")
    assert shown >= 1  # at least one demo host has a command to run
