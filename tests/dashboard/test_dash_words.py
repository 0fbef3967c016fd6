"""Pages show words and readable numbers, not internal names,
raw evidence keys, exponent notation, ISO stamps or seed file names."""

from __future__ import annotations

import json
import re

import pytest

from alerts.models import Trigger
from audit.kb.engine import KINDS, load_rules
from audit.kb.labels import KIND_LABELS, evidence_rows, label, message_value
from audit.kb.sources import describe, readable
from tests.dashboard.conftest import FIXTURES, fresh

RAW_KINDS = re.compile(r"\b(known_issue|crash_loop|risky_upgrade|new_finding|host_silent)\b")


def _visible(html: str) -> str:
    """The page without scripts, attributes and tags: what a reader sees."""
    html = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_every_kind_and_trigger_has_a_label():
    assert set(KINDS) | {"crash_loop"} <= set(KIND_LABELS)
    assert label("known_issue") == "Known issue"
    for trigger in Trigger:
        assert label(trigger.value) != trigger.value and "_" not in label(trigger.value)


def test_evidence_reads_in_the_unit_of_its_meaning():
    rows = {key: (name, value) for key, name, value in evidence_rows({
        "kv": 0.8804, "ttft_p50": 2.473e-06, "tpot_p50": 0.0175, "e2e_p50": 12.5,
        "prompt": 339968, "budget_gib": 71.2, "util": 0.9, "max_model_len": 131072,
        "by_reason": {"waiting_capacity": 3}, "missing": ["a", "b"], "cannot_check": True,
        "brand_new_key": 1.234e-7, "empty": None})}
    assert rows["kv"] == ("KV cache usage", "88.0 %")
    assert rows["ttft_p50"] == ("TTFT median", "2.47 µs")
    assert rows["tpot_p50"][1] == "17.5 ms" and rows["e2e_p50"][1] == "12.5 s"
    assert rows["prompt"][1] == "339,968 tokens" and rows["budget_gib"][1] == "71.2 GiB"
    assert rows["util"] == ("--gpu-memory-utilization", "0.9")  # a flag keeps its value
    assert rows["max_model_len"][1] == "131072"
    assert rows["by_reason"][1] == "Waiting capacity: 3"
    assert rows["missing"][1] == "a, b" and rows["cannot_check"][1] == "yes"
    assert rows["brand_new_key"] == ("Brand new key", "0.0000001234")
    assert rows["empty"][1] == "n/a"
    assert message_value("kv", 0.1122) == "11.2 %"
    assert "e-" not in message_value("whatever", 2.473e-06)


def test_references_read_as_sources_with_issue_numbers():
    assert describe("https://github.com/vllm-project/vllm/issues/50477").text == \
        "vllm issue #50477"
    assert describe("https://github.com/vllm-project/vllm/pull/41745").text == "vllm PR #41745"
    assert describe("https://github.com/QwenLM/Qwen3/issues/7").text == "QwenLM/Qwen3 issue #7"
    assert describe("https://docs.vllm.ai/en/latest/features/automatic_prefix_caching.html"
                    ).text == "vLLM docs: features/automatic_prefix_caching"
    url = "https://github.com/vllm-project/vllm/issues/1"
    assert describe(url).url == url and url in readable(url)
    for rule in load_rules().rules:  # no rule reference reads as a bare URL or file name
        for ref in rule.references:
            text = describe(ref).text
            assert "https://" not in text and "seed:" not in text and ".txt" not in text


@pytest.mark.django_db
def test_the_host_page_speaks_words_and_readable_numbers(client, role_user, demo_fleet):
    client.force_login(role_user("viewer"))
    seen_labels = 0
    for host in demo_fleet["hosts"]:
        html = client.get(f"/hosts/{host.code}/").content.decode()
        text = _visible(html)
        assert not RAW_KINDS.search(text), RAW_KINDS.search(text)
        assert not re.search(r"\d\.?\d*e-\d", text), re.search(r".{40}\d\.?\d*e-\d.{20}", text)
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text)  # ISO only in attributes
        assert "{'" not in text  # no Python dict repr anywhere
        assert "min ago" in text or "s ago" in text
        seen_labels += text.count("Known issue") + text.count("Configuration pitfall")
        for table in re.findall(r'<table class="grid compact evidence">.*?</table>', html, re.S):
            keys = re.findall(r'<th scope="row" title="([^"]+)">([^<]+)</th>', table)
            assert keys and all(shown != key or "_" not in key for key, shown in keys)
            assert "{" not in _visible(table) and "[" not in _visible(table)
    assert seen_labels


@pytest.mark.django_db
def test_a_metric_finding_says_kv_cache_usage_as_a_percentage(client, role_user, demo_fleet,
                                                               post_report, settings):
    """Live findings are judged over a window of two scrapes, so each demo host reports a
    second time (metric rules due at once) before a live finding is looked for."""
    from audit.evaluation import evaluate_report
    from audit.models import Finding
    from fleet.models import AgentToken

    settings.AUDIT_METRICS_INTERVAL_S = 0
    for host, path in zip(demo_fleet["hosts"], sorted(FIXTURES.glob("*.json")), strict=True):
        _, token = AgentToken.issue(host)
        body = fresh(json.loads(path.read_text()))
        assert post_report(body, token=token).status_code == 202
        evaluate_report(body["report_id"])
    client.force_login(role_user("viewer"))
    finding = Finding.objects.filter(evidence__has_key="kv").exclude(
        evidence__kv=None).first()
    assert finding is not None, "the demo fleet has a live-metric finding with KV usage"
    html = client.get(f"/findings/{finding.code}/").content.decode()
    text = _visible(html)
    assert re.search(r"KV cache usage\s+\d+\.\d %", text)
    assert re.search(r"KV cache usage \d+\.\d %", finding.message)
    assert "Live metric" in text and "{" not in text.split("Evidence", 1)[1].split("History")[0]


@pytest.mark.django_db
def test_rule_and_kb_pages_show_sources_not_seed_files(client, role_user):
    from audit.rulebook import current_knowledge_base

    client.force_login(role_user("viewer"))
    rules = current_knowledge_base().rules
    seeded = next(r for r in rules if any(ref.startswith("seed:") for ref in r.references))
    issue = next(r for r in rules if any("/issues/" in ref for ref in r.references))
    for rule in (seeded, issue):
        text = _visible(client.get(f"/kb/{rule.id}/").content.decode())
        refs = text.split("References", 1)[1].split("Currently firing")[0]
        assert "seed:" not in refs and ".txt" not in refs and "https://" not in refs
        assert "_" not in text.split("Id", 1)[1].split("Last verified")[0].split(")")[0] \
            .split("(", 1)[1].split(",")[0]  # the kind in words
    assert "Recipe “" in _visible(client.get(f"/kb/{seeded.id}/").content.decode())
    html = client.get(f"/kb/{issue.id}/").content.decode()
    assert re.search(r'<a href="https://github\.com/[^"]+/issues/(\d+)"[^>]*>[^<]* issue #\1</a>',
                     html)
    listing = _visible(client.get("/kb/").content.decode())
    assert "seed:" not in listing and "known_issue" not in listing and "Known issue" in listing


@pytest.mark.django_db
def test_latency_charts_are_in_ms_and_token_counts_have_separators(client, role_user,
                                                                     demo_fleet):
    import json

    client.force_login(role_user("viewer"))
    tpot_points, contexts = [], []
    for host in demo_fleet["hosts"]:
        html = client.get(f"/hosts/{host.code}/").content.decode()
        data = json.loads(html.split('id="chart-data" type="application/json">', 1)[1]
                          .split("</script>", 1)[0])
        for chart in data["charts"]:
            if chart["id"].endswith(("-ttft", "-tpot")):
                assert chart["unit"] == "ms"
            if chart["id"].endswith("-tpot"):
                tpot_points += [p[1] for ds in chart["datasets"] for p in ds["data"]
                                if p[1] is not None]
        contexts += re.findall(r"native context ([\d,]+) tokens", _visible(html))
    assert tpot_points and min(tpot_points) > 1  # 17.5 ms, not 0.0175
    assert contexts and all("," in c for c in contexts if int(c.replace(",", "")) >= 1000)
