"""The dashboard's second redaction pass covers every free-text field of a report.

An older or modified agent may send secrets the current agent would redact. Ingest runs
``fleet_agent.report_redaction.redact_report`` over the whole body: failed starts (argv,
lines, errors), probe evidence (copied into finding messages), model files (``config.json``
keys such as ``hf_token``), host labels, error lists and fields this version does not know.
Nothing of the planted secrets may be stored, nor shown on the host page.
"""

from __future__ import annotations

import json

import pytest

from fleet.models import Report
from fleet_agent.schema import REDACTED

pytestmark = pytest.mark.django_db

HF = "hf_" + "Q" * 34
SK = "sk-proj-" + "a1" * 20
BEARER = "eyJhbGciOi.JIUzI1NiJ9.bearer-secret-value"
REDIS_PW = "redis-pw-1234"
SECRETS = [HF, SK, BEARER, REDIS_PW, "cfg-password-xyz", "label-token-value",
           "api-key-in-failed-argv", "unknown-field-pw"]


def _hostile_report(make_report) -> dict:
    report_time = make_report()["collected_at"]
    probe = {"name": "tool-call-parser", "ran_at": "2026-11-29T08:00:00Z",
             "outcome": "confirmed",
             "evidence": f"request failed: Authorization: Bearer {BEARER} via "
                         f"redis://u:{REDIS_PW}@cache:6379/0"}
    model_files = {"source": "/models/x", "config": {
        "model_type": "llama", "hf_token": HF, "password": "cfg-password-xyz",
        "nested": {"auth": {"api_key": SK}}}, "errors": [f"cannot read: token={HF}"]}
    failed = {"source": "systemd", "unit_or_container": "vllm-b.service",
              "argv": ["vllm", "serve", "m", "--api-key", "api-key-in-failed-argv",
                       f"--hf-token={HF}"],
              "lines": [f"ValueError: bad key {SK}", f"Authorization: Bearer {BEARER}"],
              "errors": [f"journal: redis://u:{REDIS_PW}@cache/0"]}
    return make_report(
        server={"probes": [probe], "model_files": model_files,
                "metrics": {"format": "prometheus-text", "scraped_at": report_time,
                            "text": f'vllm:num_requests_running{{model_name="{HF}"}} 1\n'},
                "errors": [f"could not scrape: Bearer {BEARER}"],
                "x_future_field": {"note": "PASSWORD=unknown-field-pw"}},
        host={"labels": {"team": "ml", "deploy_token": "label-token-value",
                         "url": f"redis://u:{REDIS_PW}@cache/0"}},
        failed_starts=[failed], gpu_error=f"nvml: token={HF}",
        failed_start_errors=[f"docker: Bearer {BEARER}"])


def test_no_planted_secret_is_stored_from_any_field(enrolled, post_report, make_report,
                                                    client, admin_user) -> None:
    host, token = enrolled()
    response = post_report(_hostile_report(make_report), token)
    assert response.status_code == 202, response.content
    stored = json.dumps(Report.objects.get().raw)
    assert [s for s in SECRETS if s in stored] == []
    raw = Report.objects.get().raw
    assert raw["host"]["labels"] == {"team": "ml", "deploy_token": REDACTED,
                                     "url": f"redis://{REDACTED}@cache/0"}
    config = raw["servers"][0]["model_files"]["config"]
    assert config["model_type"] == "llama" and config["hf_token"] == REDACTED
    assert raw["servers"][0]["metrics"]["text"] == \
        f'vllm:num_requests_running{{model_name="{REDACTED}"}} 1\n'
    assert raw["failed_starts"][0]["argv"][:5] == ["vllm", "serve", "m", "--api-key", REDACTED]
    client.force_login(admin_user)
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert [s for s in SECRETS if s in page] == []


@pytest.mark.django_db(transaction=True)
def test_no_planted_secret_is_stored_on_the_production_insert(enrolled, post_report,
                                                              make_report) -> None:
    """Outside a test transaction ingest inserts with its own bound statement, and stores the
    body's text as received when redaction changed nothing: a body that needed redaction
    must still be stored redacted, and a clean body exactly as it was sent."""
    _, token = enrolled()
    response = post_report(_hostile_report(make_report), token)
    assert response.status_code == 202, response.content
    stored = json.dumps(Report.objects.get().raw)
    assert [s for s in SECRETS if s in stored] == []
    clean = make_report(host={"labels": {"team": "caf\u00e9 \u2603"}},
                        x_future_field={"nested": [1, 2.5, None, True, "\u00e9"]})
    body = json.dumps(clean, indent=2).encode()  # whitespace and escapes as a client may send
    assert post_report(body, token).status_code == 202
    assert Report.objects.get(report_id=clean["report_id"]).raw == json.loads(body)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_a_utf16_or_bom_body_is_stored_as_decoded(enrolled, post_report, make_report,
                                                  encoding) -> None:
    """JSON in UTF-16, or UTF-8 behind a byte-order mark, is accepted (``json.loads`` reads
    both) and stored as decoded, not as the bytes received."""
    _, token = enrolled()
    report = make_report(host={"labels": {"site": "z\u00fcrich"}})
    response = post_report(json.dumps(report, ensure_ascii=False).encode(encoding), token)
    assert response.status_code == 202, response.content
    assert Report.objects.get().raw["host"]["labels"] == {"site": "z\u00fcrich"}
