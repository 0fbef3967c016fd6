"""/api/docs publishes the report body's real schema, not an untyped object."""

from __future__ import annotations

import json

import pytest

from fleet_agent.schema import Report as WireReport


@pytest.mark.django_db
def test_the_report_body_in_openapi_is_the_wire_contract(client):
    schema = client.get("/api/openapi.json").json()
    body = schema["paths"]["/api/v1/reports"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]

    assert set(body["required"]) == set(WireReport.model_json_schema()["required"])
    assert {"schema_version", "report_id", "host", "gpus", "servers"} <= set(body["properties"])
    server = body["properties"]["servers"]["items"]
    assert {"pid", "argv", "env"} <= set(server["properties"])   # nested models are inlined
    assert "$ref" not in json.dumps(body)
