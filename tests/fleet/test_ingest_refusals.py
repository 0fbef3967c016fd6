"""Every refusal at the ingest door: status, the one error shape, and nothing stored."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from fleet.models import ChangeEvent, Gpu, Host, Report, Server
from fleet_agent.schema import MAX_REPORT_BYTES

pytestmark = pytest.mark.django_db


def assert_refused(response, status: int) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error", "details"}
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["details"], list)
    assert b"Traceback" not in response.content
    assert Report.objects.count() == 0
    assert Server.objects.count() == 0
    assert Gpu.objects.count() == 0
    assert ChangeEvent.objects.count() == 0
    return body


def test_it_rejects_a_report_without_a_token(post_report, make_report, enrolled):
    enrolled()
    response = post_report(make_report(), token=None)
    assert_refused(response, 401)
    assert response["WWW-Authenticate"] == "Bearer"


def test_it_rejects_an_unknown_token(post_report, make_report, enrolled):
    enrolled()
    assert_refused(post_report(make_report(), token="fat_not-a-real-token"), 401)


def test_it_rejects_a_revoked_token(post_report, make_report, enrolled):
    from fleet.models import AgentToken

    host, token = enrolled()
    AgentToken.objects.get(host=host).revoke()
    assert_refused(post_report(make_report(), token=token), 401)


def test_it_checks_the_token_before_reading_a_broken_body(post_report, enrolled):
    enrolled()
    assert_refused(post_report(b"{not json", token="fat_wrong"), 401)


def test_it_rejects_invalid_json_with_400(post_report, enrolled):
    _, token = enrolled()
    assert_refused(post_report(b"{\"schema_version\": 1,", token=token), 400)


def test_it_rejects_absurdly_nested_json_with_400_not_a_crash(post_report, enrolled):
    _, token = enrolled()
    body = assert_refused(post_report(b"[" * 100_000 + b"]" * 100_000, token=token), 400)
    assert body["details"][0]["message"] == "JSON nested too deeply"


def test_it_rejects_a_json_array_as_a_contract_violation(post_report, enrolled):
    _, token = enrolled()
    assert_refused(post_report(b"[1, 2]", token=token), 422)


def test_it_names_the_supported_versions_for_an_unknown_schema_version(
        post_report, make_report, enrolled):
    _, token = enrolled()
    body = assert_refused(post_report(make_report(schema_version=99), token=token), 400)
    assert "supported" in body["error"] and "1" in body["error"]


def test_it_lists_the_path_of_every_bad_field(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report(server={"pid": -5, "argv": []})
    del report["collected_at"]
    report["gpus"][0]["compute_capability"] = "nine"
    body = assert_refused(post_report(report, token=token), 422)
    paths = {d["path"] for d in body["details"]}
    assert {"collected_at", "servers[0].pid", "servers[0].argv",
            "gpus[0].compute_capability"} <= paths


def test_it_refuses_a_report_for_another_machine(post_report, make_report, enrolled):
    _, token = enrolled()
    enrolled(machine_id="machine-2", hostname="other")
    assert_refused(post_report(make_report(host={"machine_id": "machine-2"}), token=token), 403)


def test_it_refuses_a_body_over_4_mib(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report(padding="x" * (MAX_REPORT_BYTES + 1))
    assert_refused(post_report(report, token=token), 413)


def test_it_refuses_a_gzip_bomb_without_inflating_it(post_report, enrolled):
    _, token = enrolled()
    # 64 MiB of zeros compress to ~64 KiB: small on the wire, far past the cap inflated.
    bomb = gzip.compress(b"0" * (64 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < MAX_REPORT_BYTES
    assert_refused(_post_raw_gzip(bomb, token), 413)


def _post_raw_gzip(compressed: bytes, token: str):
    from django.test import Client

    return Client().post("/api/v1/reports", compressed, content_type="application/json",
                         headers={"Authorization": f"Bearer {token}",
                                  "Content-Encoding": "gzip"})


def test_it_refuses_a_gzip_report_just_over_the_cap(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report(padding="y" * MAX_REPORT_BYTES)
    assert_refused(post_report(report, token=token, gzipped=True), 413)


def test_it_rejects_a_corrupt_gzip_body(post_report, enrolled):
    _, token = enrolled()
    assert_refused(_post_raw_gzip(b"\x1f\x8b\x08\x00garbage", token), 400)


def test_it_rejects_a_truncated_gzip_body(post_report, make_report, enrolled):
    _, token = enrolled()
    data = gzip.compress(json.dumps(make_report()).encode())
    assert_refused(_post_raw_gzip(data[: len(data) // 2], token), 400)


def test_it_rejects_an_unknown_content_encoding(client, make_report, enrolled):
    _, token = enrolled()
    response = client.post("/api/v1/reports", zlib.compress(json.dumps(make_report()).encode()),
                           content_type="application/json",
                           headers={"Authorization": f"Bearer {token}", "Content-Encoding": "br"})
    assert_refused(response, 415)


def test_it_answers_429_with_retry_after_past_the_burst(post_report, make_report, enrolled,
                                                        settings):
    settings.INGEST_BURST = 2
    settings.INGEST_RATE = (1, 5)
    _, token = enrolled()
    assert post_report(make_report(), token=token).status_code == 202
    assert post_report(make_report(), token=token).status_code == 202
    refused = post_report(make_report(), token=token)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 5
    assert set(refused.json()) == {"error", "details"}
    assert Report.objects.count() == 2


def test_an_unknown_token_past_the_burst_still_gets_401_not_429(post_report, make_report,
                                                                enrolled, settings):
    """The limit is counted with the token's lookup: a token nobody issued is refused as
    unknown however often it is sent, and costs the real token nothing."""
    settings.INGEST_BURST = 1
    _, token = enrolled()
    for _ in range(3):
        assert post_report(make_report(), token="not-a-token-" + "x" * 30).status_code == 401
    assert post_report(make_report(), token=token).status_code == 202


def test_the_rate_limit_is_per_token(post_report, make_report, enrolled, settings):
    settings.INGEST_BURST = 1
    _, token_a = enrolled()
    _, token_b = enrolled(machine_id="machine-2", hostname="b")
    assert post_report(make_report(), token=token_a).status_code == 202
    assert post_report(make_report(host={"machine_id": "machine-2"}), token=token_b
                       ).status_code == 202
    assert post_report(make_report(), token=token_a).status_code == 429


def test_it_answers_503_with_retry_after_when_the_database_is_down(
        post_report, make_report, enrolled, monkeypatch):
    from django.db import OperationalError

    from fleet.models import AgentToken

    _, token = enrolled()

    def database_down(plaintext: str) -> None:
        raise OperationalError("connection to server at 127.0.0.1:5432 failed")

    monkeypatch.setattr(AgentToken, "lookup", staticmethod(database_down))
    response = post_report(make_report(), token=token)
    body = assert_refused(response, 503)
    assert int(response["Retry-After"]) > 0
    assert "5432" not in body["error"]


def test_unknown_fields_are_kept_with_the_raw_report(post_report, make_report, enrolled):
    _, token = enrolled()
    report = make_report(future_field={"x": 1})
    assert post_report(report, token=token).status_code == 202
    assert Report.objects.get().raw["future_field"] == {"x": 1}
    assert Host.objects.get().hostname == "gpu-node-1"


def test_it_refuses_a_nul_character_that_postgresql_cannot_store(post_report, make_report,
                                                                 enrolled):
    _, token = enrolled()
    body = assert_refused(post_report(make_report(server={"argv": ["vllm", "a\x00b"]}),
                                      token=token), 422)
    assert body["details"][0]["path"] == "$"


def test_it_rejects_a_gzip_body_with_trailing_garbage(make_report, enrolled):
    _, token = enrolled()
    data = gzip.compress(json.dumps(make_report()).encode())
    body = assert_refused(_post_raw_gzip(data + b"\x00trailing-garbage", token), 400)
    assert "after the end of the gzip stream" in body["error"]
    # A second gzip member is no more the agent's format than garbage is.
    assert_refused(_post_raw_gzip(data + gzip.compress(b"{}"), token), 400)


def test_a_chunked_upload_without_content_length_gets_411(make_report, enrolled):
    """What gunicorn hands Django for ``Transfer-Encoding: chunked``: no CONTENT_LENGTH."""
    from django.test import Client

    _, token = enrolled()
    data = json.dumps(make_report()).encode()
    answer = Client().post("/api/v1/reports", data, content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"},
                           CONTENT_LENGTH="", HTTP_TRANSFER_ENCODING="chunked")
    body = assert_refused(answer, 411)
    assert "Content-Length required" in body["error"]
