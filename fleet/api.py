"""The agent ingest API (django-ninja) under ``/api/v1/``; OpenAPI at ``/api/docs``.

Strict at the door, in this order for ``POST /api/v1/reports``: bearer token
(401), rate limit (429), body size after decompression (413), JSON (400),
``schema_version`` (400), contract (422), host identity (403). Every refusal
answers ``{"error": ..., "details": [...]}`` and stores nothing. Accepted reports
answer 202 once the raw body is inserted; derivation (servers, GPUs, samples, change
events) and evaluation are enqueued after commit and run in the worker. No stack trace ever leaves.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.http import HttpRequest, HttpResponse, JsonResponse
from kombu.exceptions import OperationalError as BrokerError
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.responses import Status
from ninja.security import HttpBearer

from fleet import jsonread, lane, token_cache
from fleet import probes as fleet_probes
from fleet.bodies import BodyError, drain, read_capped_body
from fleet.client_ip import client_ip, client_ip_or_none
from fleet.lane import steady_key
from fleet.metrics_text import text_due
from fleet.models import (
    AgentToken,
    EnrollmentSecret,
    Host,
    Report,
    future_cutoff,
    past_cutoff,
    sha256_hex,
)
from fleet.ratelimit import check_rate
from fleet.recording import server_identity, store_report
from fleet.signals import report_needs_evaluation
from fleet_agent.report_redaction import redact_report
from fleet_agent.schema import (
    MAX_REPORT_BYTES,
    SUPPORTED_SCHEMA_VERSIONS,
    ReportError,
    parse_report,
    shallow_text,
)
from fleet_agent.schema import Report as WireReport

log = logging.getLogger(__name__)


class ApiRefusal(Exception):
    """A refusal with a status, an error message and per-field details."""

    def __init__(self, status: int, error: str, details: list[Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status, self.error = status, error
        self.details, self.headers = details or [], headers or {}


def error_response(status: int, error: str, details: list[Any] | None = None,
                   headers: dict[str, str] | None = None) -> JsonResponse:
    """The one error shape: ``{"error": str, "details": list}``."""
    response = JsonResponse({"error": error, "details": details or []}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


class TokenAuth(HttpBearer):
    """Bearer host token, looked up by sha256 before anything else touches the request.

    A token waiting for an admin's approval (re-enrollment of a known machine) is refused
    with 403 and says so; unknown and revoked tokens get 401. A live token's lookup is
    reused while nothing about tokens changed (:mod:`fleet.token_cache`, which says how fast
    a revocation takes effect).
    """

    def authenticate(self, request: HttpRequest, token: str) -> AgentToken | None:
        agent_token, request.ingest_wait_s = token_cache.for_ingest(token)
        if agent_token is None:
            return None
        if agent_token.pending:
            raise ApiRefusal(403, "this host's re-enrollment awaits an admin's approval "
                             "(Settings > Pending enrollments)")
        agent_token.touch()
        return agent_token


class PendingOrLiveTokenAuth(HttpBearer):
    """A live or pending token: an uninstall may revoke a re-enrollment nobody approved."""

    def authenticate(self, request: HttpRequest, token: str) -> AgentToken | None:
        return AgentToken.lookup(token)


api = NinjaAPI(title="vLLM Fleet Audit agent API", version="1", docs_url="/docs",
               urls_namespace="api")


@api.exception_handler(ApiRefusal)
def _refusal(request: HttpRequest, exc: ApiRefusal) -> HttpResponse:
    drain(request, _DRAIN_BYTES)  # refused before the body was read (403 pending, 429)
    return error_response(exc.status, exc.error, exc.details, exc.headers)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    drain(request, _DRAIN_BYTES)
    return error_response(401, "missing, unknown or revoked token",
                          headers={"WWW-Authenticate": "Bearer"})


#: What a refusal reads of a body it did not need: the proxy's cap (deploy/Caddyfile, 4 MiB
#: plus gzip's overhead) and no more.
_DRAIN_BYTES = MAX_REPORT_BYTES + 64 * 1024


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    details = [{"path": ".".join(str(p) for p in e.get("loc", ()) if p != "body"),
                "message": e.get("msg", "")} for e in exc.errors]
    return error_response(422, "request does not match the schema", details)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return error_response(exc.status_code, str(exc))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(413, "request body too large",
                          [{"path": "$", "message": "over DATA_UPLOAD_MAX_MEMORY_SIZE"}])


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("database unavailable: %s", exc)
        return error_response(503, "database unavailable, retry later",
                              headers={"Retry-After": str(settings.INGEST_RETRY_AFTER_S)})
    log.exception("unexpected error in the agent API")
    return error_response(500, "internal error")


#: Longest enrollment secret accepted (ours are 36 characters); bounds the hashing work.
MAX_SECRET_CHARS = 128


class EnrollIn(Schema):
    """Enrollment request: the shared secret and the host's identity.

    ``previous_token``: the token this machine holds now (a re-install); when it is this
    machine's live token, the new one replaces it without an admin's approval.
    """

    secret: str = Field(min_length=1, max_length=MAX_SECRET_CHARS)
    machine_id: str = Field(min_length=1, max_length=255)
    hostname: str = Field(min_length=1, max_length=255)
    previous_token: str | None = Field(default=None, max_length=MAX_SECRET_CHARS)


class EnrollOut(Schema):
    """The host token, shown once; only its sha256 is stored. ``pending``: it works once an
    admin approves the re-enrollment (the machine already had a live token)."""

    token: str
    host: str
    machine_id: str
    pending: bool = False


class RevokedOut(Schema):
    """The presented token is revoked."""

    revoked: bool


class ErrorOut(Schema):
    """Every refusal: a message and a list of details (``{"path", "message"}`` for 422)."""

    error: str
    details: list[Any]


class AcceptedOut(Schema):
    """Accepted (or already stored) report."""

    report_id: str
    duplicate: bool
    #: Live probes due on this host's servers; absent when none are.
    probes: list[dict[str, Any]] | None = None
    #: This dashboard derives from ``servers[].metrics.compact``: the agent may leave the raw
    #: /metrics text out (it sends it every cycle until it has seen this once).
    metrics_compact: bool = True
    #: Server identities (``port:8000``, ``*`` for all) whose raw /metrics text the dashboard
    #: wants with the next report; absent when none.
    metrics_text: list[str] | None = None


def _client_ip(request: HttpRequest) -> str:
    return client_ip(request)  # fleet.client_ip: X-Real-IP only behind our proxy


def _ip_or_none(request: HttpRequest) -> str | None:
    return client_ip_or_none(request)


def _enroll_keys(request: HttpRequest, secret: str) -> tuple[str, str]:
    return (f"enroll-ip:{_client_ip(request)}", f"enroll-secret:{sha256_hex(secret)[:32]}")


def _enroll_wait(request: HttpRequest, secret: str) -> None:
    """429 while the client IP or the presented secret has used up its refused attempts."""
    for key in _enroll_keys(request, secret):
        wait_s = check_rate(key, rate=settings.ENROLL_RATE, burst=settings.ENROLL_BURST,
                            consume=False)
        if wait_s > 0:
            raise ApiRefusal(429, "too many enrollment attempts",
                             headers={"Retry-After": str(math.ceil(wait_s))})


def _enroll_refused(request: HttpRequest, secret: str) -> None:
    """Count a refused attempt against the client IP and the secret (``ENROLL_RATE``).

    Only refusals count: guessing is what the limit stops, while a valid multi-machine
    secret enrolling a rack from one jump host is bounded by its ``max_uses`` instead.
    """
    for key in _enroll_keys(request, secret):
        check_rate(key, rate=settings.ENROLL_RATE, burst=settings.ENROLL_BURST)


def _printable(field: str, value: str) -> str:
    """``value`` stripped; 422 naming ``field`` unless it is 1-255 printable characters
    (:meth:`str.isprintable`: no CR/LF, ESC or other control, no line separator). The same
    rule for a hostname at enrollment and in every report."""
    value = value.strip()
    if not value or not value.isprintable():
        raise ApiRefusal(422, f"{field} must be 1-255 printable characters",
                         [{"path": field, "message": "empty or not printable"}])
    return value


@api.post("/v1/enroll", response={201: EnrollOut, 202: EnrollOut, 403: ErrorOut,
                                  422: ErrorOut, 429: ErrorOut},
          summary="Exchange an enrollment secret for a host token")
def enroll(request: HttpRequest, payload: EnrollIn) -> Status:
    """Issue a host token (shown once) for ``machine_id``.

    201: a new machine, or a re-install presenting this machine's live ``previous_token``
    (revoked now). 202 ``pending``: the machine already has a live token, so the new one
    waits for an admin's approval in Settings; the old one keeps working until then.
    403: unknown, revoked, expired or used-up secret. 429: rate limited.
    """
    _enroll_wait(request, payload.secret)
    machine_id = _printable("machine_id", payload.machine_id)
    hostname = _printable("hostname", payload.hostname)
    with transaction.atomic():
        secret = EnrollmentSecret.match(payload.secret)
        if secret is None or not secret.consume():
            _enroll_refused(request, payload.secret)
            raise ApiRefusal(403, "invalid, revoked, expired or used-up enrollment secret")
        host, created = Host.objects.get_or_create(machine_id=machine_id,
                                                   defaults={"hostname": hostname})
        live = AgentToken.live().filter(host=host)
        previous = AgentToken.authenticate(payload.previous_token) \
            if payload.previous_token else None
        replaces = previous is not None and previous.host_id == host.pk
        pending = not created and not replaces and live.exists()
        _, plaintext = AgentToken.issue(host, secret=secret, pending=pending,
                                        requested_hostname=hostname,
                                        requested_from=_ip_or_none(request))
        if replaces:
            previous.revoke()
    if pending:
        log.warning("re-enrollment of known machine %s from %s awaits approval",
                    machine_id, _client_ip(request))
        return Status(202, {"token": plaintext, "host": hostname, "machine_id": machine_id,
                            "pending": True})
    return Status(201, {"token": plaintext, "host": host.hostname,
                        "machine_id": host.machine_id, "pending": False})


@api.post("/v1/revoke", auth=PendingOrLiveTokenAuth(), response={200: RevokedOut, 401: ErrorOut},
          summary="Revoke the presented host token (agent uninstall)")
def revoke(request: HttpRequest) -> Status:
    """The agent's uninstall revokes its own token; the next use answers 401."""
    token: AgentToken = request.auth
    token.revoke()
    return Status(200, {"revoked": True})


def _inline_refs(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """``node`` with every ``{"$ref": "#/$defs/X"}`` replaced by ``defs[X]``; a model that
    refers to itself (directly or through others, e.g. a JSON value type) is inlined once
    and then described as any value (``{}``), so this ends."""
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            return {} if name in seen else _inline_refs(defs[name], defs, seen | {name})
        return {key: _inline_refs(value, defs, seen) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline_refs(value, defs, seen) for value in node]
    return node


def report_body_schema() -> dict[str, Any]:
    """The JSON schema of the report body, from the agent's own pydantic models
    (``fleet_agent.schema.Report``; prose: docs/wire-contract.md), self-contained."""
    schema = WireReport.model_json_schema()
    defs = schema.pop("$defs", {})
    return _inline_refs(schema, defs)


_REPORT_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": report_body_schema()}}}}


@api.post("/v1/reports", auth=TokenAuth(), openapi_extra=_REPORT_BODY,
          response={202: AcceptedOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut,
                    411: ErrorOut, 413: ErrorOut, 415: ErrorOut, 422: ErrorOut, 429: ErrorOut,
                    503: ErrorOut},
          exclude_none=True,  # no "probes" key unless some are due
          summary="Submit one agent report (optionally gzip-encoded)")
def submit_report(request: HttpRequest) -> Status:
    """Validate and store one report; 202 also for a re-sent ``report_id`` (stored once)."""
    token: AgentToken = request.auth
    wait_s = getattr(request, "ingest_wait_s", None)  # counted with the token's lookup
    if wait_s is None:
        wait_s = check_rate(token.token_hash[:32])
    if wait_s > 0:
        raise ApiRefusal(429, "rate limit exceeded",
                         headers={"Retry-After": str(math.ceil(wait_s))})
    decoded, text, strict = _decode_body(request)
    raw = redact_report(decoded)  # the agent redacts; this is the second line
    # The body's own text is stored when redaction changed nothing (the common case): no
    # second serialisation of the document. Redaction copies, never edits, ``decoded``.
    stored_text = text if text is not None and raw == decoded else None
    # orjson refused NaN/Infinity, lone surrogates and bad UTF-8 and the body holds no
    # escaped NUL, so the contract's JSON checks come down to the depth, read off the text.
    wire = _validate(raw, strict and stored_text is not None and shallow_text(stored_text))
    if wire.host.machine_id != token.host.machine_id:
        raise ApiRefusal(403, "report machine_id does not match this token's host",
                         [{"path": "host.machine_id", "message": "belongs to another host"}])
    key = steady_key(raw)
    steady = _through_lane(token.host.pk, wire, raw, key, stored_text)
    if steady is not None:
        return Status(202, _with_probe_requests(steady, token, wire, True))
    # Only the raw insert happens here; servers, GPUs, samples, change events and the
    # evaluation follow in the worker (audit.tasks.evaluate_report).
    # One autocommitted INSERT (no BEGIN/SAVEPOINT/COMMIT round trips); on_commit outside a
    # transaction runs at once, i.e. after that INSERT committed.
    report, created = store_report(token.host, wire, raw, key, stored_text)
    if report is None:  # the host was deleted while its token was cached (fleet.token_cache)
        token_cache.forget(token.token_hash)
        raise AuthenticationError()
    if created:
        transaction.on_commit(partial(enqueue_evaluation, str(report.report_id),
                                      report.host_id))
    answer = {"report_id": str(report.report_id), "duplicate": not created,
              "metrics_compact": True}
    if created and text_due(wire):
        answer["metrics_text"] = ["*"]
    return Status(202, _with_probe_requests(answer, token, wire, created))


def _through_lane(host_id: int, wire: Any, raw: dict[str, Any], key: str,
                  raw_text: str | None) -> dict[str, Any] | None:
    """The 202 answer of a report applied by the steady lane (``fleet.lane``: nothing changed but
    metrics; queued only when its metric rules are due), or None when the lane is closed for
    it and it takes the long way. A host deleted meanwhile takes the long way too, which
    answers 401."""
    if not lane.supported():
        return None
    try:
        applied = lane.apply(host_id, wire, raw, key,
                             [server_identity(s) for s in wire.servers], raw_text)
    except IntegrityError:
        return None
    if applied is None:
        return None
    report_id = str(wire.report_id)
    if applied.due:
        enqueue_evaluation(report_id, host_id)
    answer = {"report_id": report_id, "duplicate": False, "metrics_compact": True}
    if text_due(wire):
        answer["metrics_text"] = ["*"]
    return answer


def _with_probe_requests(answer: dict[str, Any], token: Any, wire: Any,
                         created: bool) -> dict[str, Any]:
    """Add the live probes due on this report's servers to the 202 answer; a host
    without an enabled policy (``has_probes`` of the token lookup) costs no query."""
    host = token.host
    if created and getattr(token, "has_probes", True):
        due = fleet_probes.due_requests(host, [server_identity(s) for s in wire.servers])
        if due:
            answer["probes"] = due
    return answer


def _decode_body(request: HttpRequest) -> tuple[dict[str, Any], str | None, bool]:
    """``(the body's JSON object, its text, strict)``; the text is None when PostgreSQL's
    ``jsonb`` might not read it as ``json.loads`` did (not strict UTF-8, or a byte-order mark,
    which ``json.loads`` skips); ``strict``: orjson read it (see
    :func:`fleet.jsonread.loads`). Raises :class:`ApiRefusal` (400, 413, 415, 422)."""
    try:
        body = read_capped_body(request, MAX_REPORT_BYTES)
    except BodyError as exc:
        raise ApiRefusal(exc.status, exc.message) from None
    if b"\\u0000" in body:  # PostgreSQL's jsonb cannot store NUL characters
        raise ApiRefusal(422, "report contains a NUL character (\\u0000)",
                         [{"path": "$", "message": "NUL characters are not accepted"}])
    try:
        raw, strict = jsonread.loads(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and an integer past
        # Python's 4300-digit conversion limit (a plain ValueError)
        raise ApiRefusal(400, "body is not valid JSON", [{"path": "$", "message": str(exc)}]) \
            from None
    except RecursionError:  # e.g. 100,000 nested arrays: no report is shaped like that
        raise ApiRefusal(400, "body is not valid JSON",
                         [{"path": "$", "message": "JSON nested too deeply"}]) from None
    if not isinstance(raw, dict):
        raise ApiRefusal(422, "report must be a JSON object",
                         [{"path": "$", "message": "expected an object"}])
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:  # UTF-16 or UTF-32, which json.loads detects
        return raw, None, strict
    return raw, None if text.startswith("\ufeff") else text, strict




def _validate(raw: dict[str, Any], json_checked: bool = False) -> Any:
    """The contract report of ``raw``; ``json_checked``: ``fleet_agent.schema.json_problems``
    is known to find nothing (see :func:`submit_report`). Raises :class:`ApiRefusal` (400
    for an unknown schema version, 422 naming the field)."""
    version = raw.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS or isinstance(version, bool):
        supported = list(SUPPORTED_SCHEMA_VERSIONS)
        raise ApiRefusal(400, f"unsupported schema_version {version!r}; supported: {supported}",
                         [{"path": "schema_version", "message": f"supported: {supported}"}])
    try:
        wire = parse_report(raw, json_checked)
    except ReportError as exc:
        raise ApiRefusal(422, "report does not match the contract", exc.details) from None
    _printable("host.hostname", wire.host.hostname)
    _refuse_out_of_range(wire)
    return wire


def _refuse_out_of_range(wire: Any) -> None:
    """422 for times past :func:`fleet.models.future_cutoff` (``COLLECTED_AT_MAX_AHEAD_S``: a
    2099 ``collected_at`` would make every later report look like a late replay) or before
    :func:`fleet.models.past_cutoff` (``COLLECTED_AT_MAX_AGE_DAYS``: ``0001-01-01`` overflows
    the evaluation's date arithmetic)."""
    late, early = future_cutoff(), past_cutoff()
    times = [("collected_at", wire.collected_at)] + [
        (f"servers[{i}].metrics.scraped_at", s.metrics.scraped_at)
        for i, s in enumerate(wire.servers) if s.metrics is not None]
    ahead = [{"path": path, "message": f"{value.isoformat()} is more than "
              f"{settings.COLLECTED_AT_MAX_AHEAD_S} s ahead of the dashboard's clock"}
             for path, value in times if value > late]
    if ahead:
        raise ApiRefusal(422, "report is dated in the future", ahead)
    behind = [{"path": path, "message": f"{value.isoformat()} is more than "
               f"{settings.COLLECTED_AT_MAX_AGE_DAYS} days behind the dashboard's clock"}
              for path, value in times if value < early]
    if behind:
        raise ApiRefusal(422, "report is dated too far in the past", behind)


def enqueue_evaluation(report_id: str, host_id: int | None = None) -> None:
    """Ask for the report's evaluation (:data:`fleet.signals.report_needs_evaluation`, whose
    audit receiver queues ``audit.tasks.evaluate_report``); a broker outage is logged only.

    Runs as an on-commit callback (what ``delay_on_commit`` does), but with the
    broker error caught: the report is stored, and ``fleet.tasks.sweep_unevaluated``
    enqueues it again once the broker is back.
    """
    try:
        report_needs_evaluation.send(sender=Report, report_id=report_id, host_id=host_id)
    except BrokerError as exc:
        log.warning("broker unavailable, report %s left for the sweep: %s", report_id, exc)


@api.get("/v1/health", response={200: dict, 503: ErrorOut}, summary="Liveness and database check")
def health(request: HttpRequest) -> Status:
    """200 ``{"status": "ok"}`` when the database answers; 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        raise ApiRefusal(503, "database unavailable",
                         headers={"Retry-After": str(settings.INGEST_RETRY_AFTER_S)}) from None
    return Status(200, {"status": "ok"})
