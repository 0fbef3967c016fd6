"""The findings CSV export never hands a spreadsheet a formula."""

from __future__ import annotations

import csv
import io

import pytest

from audit.models import Finding

pytestmark = pytest.mark.django_db

PAYLOADS = ["=HYPERLINK(\"http://evil\")", "+1+cmd", "-2+3", "@SUM(A1)",
            "\t=1+1", "\r=1+1", " =1+1", "  @x", "|calc.exe", " |calc", "\t|x", "\n=1"]


def test_cells_that_a_spreadsheet_would_run_are_prefixed_with_a_quote(client, demo_fleet,
                                                                      role_user):
    client.force_login(role_user("viewer"))
    finding = Finding.objects.active().first()
    for payload in PAYLOADS:
        finding.ack_note = payload
        finding.save(update_fields=["ack_note"])
        body = b"".join(client.get("/findings/export.csv").streaming_content).decode()
        row = next(r for r in csv.DictReader(io.StringIO(body))
                   if r["code"] == str(finding.code))
        assert row["ack_note"] == "'" + payload, payload


def test_plain_text_is_exported_unchanged(client, demo_fleet, role_user):
    client.force_login(role_user("viewer"))
    finding = Finding.objects.active().first()
    finding.ack_note = "rolled back; see OPS-12 (a = b)"
    finding.save(update_fields=["ack_note"])
    body = b"".join(client.get("/findings/export.csv").streaming_content).decode()
    row = next(r for r in csv.DictReader(io.StringIO(body)) if r["code"] == str(finding.code))
    assert row["ack_note"] == "rolled back; see OPS-12 (a = b)"
