"""One hostile report never answers 500 (harden items 1 and 2): odd ports, long socket
paths, bad base_urls, giant integers and deep JSON get a 4xx or are stored."""

from __future__ import annotations

import json

import pytest

from fleet.models import Report, Server
from fleet_agent.schema import REDACTED

pytestmark = pytest.mark.django_db

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("argv", [
    ["vllm", "serve", "m", "--port", "\u00b2"],
    ["vllm", "serve", "m", "--port=\u0663"],
    ["vllm", "serve", "m", "--port", "9" * 5000],
    ["vllm", "serve", "m", "--port", "99999999"],
    ["vllm", "serve", "m", "--uds", "/run/" + "s" * 600],
])
def test_an_odd_port_or_socket_in_argv_is_stored_not_a_500(enrolled, post_report, make_report,
                                                           argv):
    _, token = enrolled()
    response = post_report(make_report(server={"argv": argv, "base_url": None}), token)
    assert response.status_code == 202, response.content
    identity = Server.objects.get().identity
    assert len(identity) <= 255
    assert identity == "port:8000" or identity.startswith("unix:")


def test_a_failed_start_with_a_long_socket_path_is_stored(enrolled, post_report, make_report):
    _, token = enrolled()
    failed = {"source": "systemd", "unit_or_container": "vllm-b.service",
              "argv": ["vllm", "serve", "m", "--uds", "/run/" + "s" * 600]}
    response = post_report(make_report(failed_starts=[failed]), token)
    assert response.status_code == 202, response.content
    assert Server.objects.filter(failed_start__isnull=False).count() == 1


@pytest.mark.parametrize("base_url", ["http://h:abc/", "http://[::1]:99999999/", "http://[zz/",
                                      "ftp://h:21/"])
def test_a_base_url_that_does_not_parse_is_a_422_naming_the_field(enrolled, post_report,
                                                                   make_report, base_url):
    _, token = enrolled()
    response = post_report(make_report(server={"base_url": base_url}), token)
    assert response.status_code == 422, response.content
    assert "servers[0].base_url" in [d["path"] for d in response.json()["details"]]


def test_an_integer_past_pythons_digit_limit_is_a_400(enrolled, post_report, make_report):
    _, token = enrolled()
    body = json.dumps(make_report()).replace('"pid": ', '"pid": ' + "9" * 5000 + ", \"x\": ", 1)
    response = post_report(body.encode(), token)
    assert response.status_code == 400, response.content
    assert Report.objects.count() == 0


def test_a_5000_deep_argv_word_is_stored_redacted(enrolled, post_report, make_report):
    _, token = enrolled()
    argv = ["vllm", "serve", "m", "--speculative-config", DEEP]
    response = post_report(make_report(server={"argv": argv}), token)
    assert response.status_code == 202, response.content
    assert Server.objects.get().argv[-1] == REDACTED


@pytest.mark.parametrize("length", ["\u00b2", "9" * 5000])
def test_a_content_length_that_is_not_an_ascii_number_is_a_411(enrolled, make_report, length):
    from django.test import Client

    _, token = enrolled()
    answer = Client().post("/api/v1/reports", json.dumps(make_report()).encode(),
                           content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"}, CONTENT_LENGTH=length)
    assert answer.status_code == 411, answer.content


def test_a_retry_after_of_non_ascii_digits_is_ignored():
    from alerts.transports.http import parse_retry_after

    assert parse_retry_after("\u00b2") is None and parse_retry_after("30") == 30.0


@pytest.mark.parametrize("markers", [["<think>"], ["x"] * 129, "tool_call_tag", [7]])
def test_bad_template_markers_are_a_422_naming_the_field(enrolled, post_report, make_report,
                                                         markers):
    _, token = enrolled()
    template = {"sha256": "a" * 64, "size_bytes": 10, "markers": markers}
    response = post_report(make_report(server={"chat_template": template}), token)
    assert response.status_code == 422, response.content
    paths = [d["path"] for d in response.json()["details"]]
    assert any(p.startswith("servers[0].chat_template.markers") for p in paths), paths


def test_template_markers_from_a_newer_agent_are_stored(enrolled, post_report, make_report):
    _, token = enrolled()
    template = {"sha256": "a" * 64, "size_bytes": 10,
                "markers": ["function_xml", "a_marker_from_the_future"]}
    response = post_report(make_report(server={"chat_template": template}), token)
    assert response.status_code == 202, response.content
    stored = Report.objects.get().raw["servers"][0]["chat_template"]["markers"]
    assert stored == ["function_xml", "a_marker_from_the_future"]
