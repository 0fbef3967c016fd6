"""Bad input at scale: schemathesis against the served OpenAPI schema of the agent API.

The schema is the one the running app serves at ``/api/openapi.json`` (django-ninja),
loaded and called through the WSGI application (schemathesis ``from_wsgi``), on the test
database. For each of the two agent operations, ``POST /api/v1/enroll`` and
``POST /api/v1/reports``, schemathesis generates conforming (positive) and schema-breaking
(negative) requests; a user would notice two things, and both are asserted on every one:

* no 5xx: nothing an agent or an attacker can send makes the server fail;
* every refusal (4xx) is a clear error: JSON ``{"error": non-empty str, "details": list}``.

The served schema describes a report body only as "an object"; so that generated reports
also reach the deep paths (contract validation, host identity, storage of hosts, servers,
GPUs and metric samples), the reports test additionally draws bodies from the contract's
own JSON schema (``fleet_agent.schema.Report``) with the token's ``machine_id``.

SCHEMATHESIS_EXAMPLES (env, default 600) is hypothesis' max_examples of each of the two
tests (one per operation; each mixes positive, negative and, for reports, contract cases),
so the default makes about 1,200 requests (about a minute here); the target is at least
1,000. Each test prints
its request count and status histogram (``pytest -s``).
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fleet_agent.schema import Report as ContractReport

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "600"))
# No shrink phase: a failing request is printed whole (body included), and shrinking
# through the database costs minutes; the test stays bounded when it finds a bug.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))
ENROLL, REPORTS = "/api/v1/enroll", "/api/v1/reports"
pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def keep_test_connection() -> Any:
    """Keep the test transaction's connection open across WSGI calls.

    schemathesis calls the WSGI handler directly, which closes "old" connections at the end
    of each request (``close_old_connections``); Django's own test client disconnects that
    handler for the same reason, so this does too, for the test only.
    """
    from django.core import signals
    from django.db import close_old_connections

    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def api(settings: Any, keep_test_connection: None) -> dict[str, Any]:
    """The served schema, a valid enrollment secret and a host token; rate limit lifted."""
    from fleet.models import AgentToken, EnrollmentSecret, Host

    settings.INGEST_RATE, settings.INGEST_BURST = (1_000_000, 1), 1_000_000
    _, secret = EnrollmentSecret.create("schemathesis", max_uses=10**6)
    host = Host.objects.create(machine_id="fuzz-machine", hostname="fuzz-node")
    _, token = AgentToken.issue(host)
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
    return {"schema": schema, "secret": secret, "token": token,
            "machine_id": host.machine_id, "calls": Counter()}


def contract_schema(served: dict[str, Any]) -> dict[str, Any]:
    """The served document with the report body replaced by the contract's JSON schema."""
    doc = copy.deepcopy(served)
    body = ContractReport.model_json_schema(ref_template="#/components/schemas/{model}")
    doc["components"]["schemas"].update(body.pop("$defs", {}))
    content = doc["paths"][REPORTS]["post"]["requestBody"]["content"]["application/json"]
    content["schema"] = body
    return doc


def check(api: dict[str, Any], case: Any, headers: dict[str, str] | None = None) -> None:
    """Call the app with ``case``; assert no 5xx and a clear error body on every 4xx."""
    if headers:  # replaces a generated Authorization, whatever its spelling
        kept = {k: v for k, v in (case.headers or {}).items()
                if k.lower() not in {h.lower() for h in headers}}
        case.headers = {**kept, **headers}
    response = case.call()
    api["calls"][(case.path, response.status_code)] += 1
    assert response.status_code < 500, (
        f"{case.method} {case.path} answered {response.status_code} {response.text[:300]} "
        f"to body {json.dumps(case.body, default=str)[:2000]}")
    if response.status_code >= 400:
        error = response.json()
        assert isinstance(error.get("error"), str) and error["error"].strip(), response.text
        assert isinstance(error.get("details"), list), response.text


def with_machine_id(machine_id: str) -> Any:
    """Mapper: give a generated contract report ``schema_version`` 1 (the contract's JSON
    schema says only "integer"), the token host's ``machine_id``, a ``collected_at`` of now
    (ingest refuses times more than a year old or in the future, which a random date-time
    almost always is) and a printable hostname (refused otherwise, as at enrollment), so the
    version gate, the clock and identity checks pass and the report is stored (the deepest
    path)."""
    def fix(case: Any) -> Any:
        if isinstance(case.body, dict) and isinstance(case.body.get("host"), dict):
            case.body["schema_version"] = 1
            case.body["host"]["machine_id"] = machine_id
            case.body["collected_at"] = datetime.now(UTC).isoformat()
            hostname = case.body["host"].get("hostname")
            if not (isinstance(hostname, str) and hostname.isprintable()):
                case.body["host"]["hostname"] = "fuzz-host"
        return case
    return fix


def test_enroll_never_fails_on_generated_input(api: dict[str, Any], settings: Any) -> None:
    # Refused attempts count against the client's enrollment rate; the fuzzer
    # sends hundreds from one address, so lift the burst here: this test is about 5xx.
    settings.ENROLL_BURST = 10**6
    operation = api["schema"][ENROLL]["POST"]
    modes = [operation.as_strategy(mode) for mode in schemathesis.GenerationMode]
    valid = operation.as_strategy(body={"secret": api["secret"], "machine_id": "fuzz-enrolled",
                                        "hostname": "fuzz"})

    @FUZZ
    @given(case=st.one_of(*modes, valid))
    def run(case: Any) -> None:
        check(api, case)

    run()
    print(f"\nenroll: {sum(api['calls'].values())} requests, statuses {dict(api['calls'])}")
    assert sum(n for (_, status), n in api["calls"].items() if status == 201) >= 1


def test_reports_never_fail_on_generated_input(api: dict[str, Any]) -> None:
    served = api["schema"][REPORTS]["POST"]
    contract = schemathesis.openapi.from_dict(contract_schema(api["schema"].raw_schema))
    contract.app = api["schema"].app
    deep = contract[REPORTS]["POST"].as_strategy().map(with_machine_id(api["machine_id"]))
    bearer = {"Authorization": f"Bearer {api['token']}"}

    @FUZZ
    @given(case=st.one_of(*(served.as_strategy(mode) for mode in schemathesis.GenerationMode),
                          deep), authorised=st.sampled_from([True, True, True, False]))
    def run(case: Any, authorised: bool) -> None:
        # Unauthorised cases keep whatever Authorization schemathesis generated (or none).
        check(api, case, headers=bearer if authorised else None)

    run()
    print(f"\nreports: {sum(api['calls'].values())} requests, statuses {dict(api['calls'])}")
    statuses = {status for _, status in api["calls"]}
    assert {202, 422} <= statuses  # stored reports and contract refusals were both reached
