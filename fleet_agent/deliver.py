"""Delivering reports to the dashboard: gzip POST, backoff with jitter, spool, replay.

Every new report is spooled first, then the spool is drained oldest-first, so order
is kept and a crash between collection and delivery loses nothing (the re-sent
``report_id`` is stored once by the server, ``docs/wire-contract.md``).

Outcomes per POST ``/api/v1/reports``:
* 200/201/202: delivered, file removed;
* connection error, timeout, 5xx, 429: transient, retried with exponential backoff
  and jitter within the cycle's time budget (``Retry-After`` honoured), then left in
  the spool and the drain stops until the next cycle;
* 401/403: the token is wrong or revoked, not the report: kept in the spool (bounded,
  oldest dropped) and the drain stops, so a re-enrolled agent still delivers the backlog;
* any other 4xx (400, 413, 422...): the server's error body is logged and the report
  moved to ``<spool>/rejected/`` (the newest 10 kept for inspection), never retried, so
  one bad report never blocks the ones behind it;
* HTTP 500 (the dashboard failed on this report): transient, but counted per report in the
  state file across cycles; after :data:`MAX_SERVER_ERRORS` the report is set aside like a
  4xx one, so a poison report cannot jam the spool head-of-line forever. 502/503/504 (proxy
  or database down) are not counted: they say nothing about the report;
* except a 502 to a body over the dashboard's cap (:func:`over_the_cap`: ``MAX_REPORT_BYTES``
  compressed or decompressed): the dashboard answers such a body 413 before reading it, and
  a proxy still writing it then answers 502 (a broken pipe). That report is rejected too.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import httpx

from fleet_agent import __version__
from fleet_agent.schema import MAX_REPORT_BYTES, PROBE_NAMES
from fleet_agent.spool import Spool, SpoolEntry

log = logging.getLogger("fleet_agent.deliver")

REPORTS_PATH = "/api/v1/reports"
ENROLL_PATH = "/api/v1/enroll"
REVOKE_PATH = "/api/v1/revoke"
#: Seconds to establish a connection to the dashboard.
CONNECT_TIMEOUT_S = 5.0
#: Seconds to wait for the dashboard's answer (ingest stores and answers 202 quickly).
READ_TIMEOUT_S = 15.0
#: Attempts per report within one cycle before leaving it for the next cycle.
MAX_ATTEMPTS = 3
#: First backoff delay in seconds; doubles per attempt, times a jitter in [0.5, 1.5).
BASE_DELAY_S = 1.0
#: No single wait is longer than this many seconds.
MAX_DELAY_S = 30.0
#: HTTP 500 answers to one report (over all cycles) before it is set aside as poison.
MAX_SERVER_ERRORS = 5
#: Statuses counted towards MAX_SERVER_ERRORS: the dashboard failed on the report itself.
_POISON_STATUSES = frozenset({500})


@dataclass
class PostResult:
    """One POST's outcome: ``kind`` is ``delivered``, ``transient``, ``auth`` or ``rejected``."""

    kind: str
    status: int | None
    detail: str
    retry_after_s: float | None = None
    #: Live probes the dashboard asked for: ``{server identity: [probe names]}``.
    probes: dict[str, list[str]] | None = None
    #: Servers whose raw /metrics text the dashboard asked for (``metrics_text`` answer).
    metrics_text: list[str] = field(default_factory=list)
    #: The dashboard said it derives from the compact form (``metrics_compact`` answer).
    reads_compact: bool = False


def gzip_body(data: bytes) -> bytes:
    """Gzip a JSON body (level 6: the usual size/CPU balance for text)."""
    return gzip.compress(data, compresslevel=6)


def retry_after_seconds(value: str | None) -> float | None:
    """Parse a ``Retry-After`` header (seconds or HTTP date) into seconds >= 0, or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def make_client() -> httpx.Client:
    """The dashboard client: explicit timeouts, no proxy surprises from the environment."""
    return httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                        headers={"User-Agent": f"fleet-agent/{__version__}"},
                        trust_env=False)


def over_the_cap(body_gz: bytes) -> bool:
    """True when the gzipped report ``body_gz`` is more than :data:`MAX_REPORT_BYTES` on the
    wire or once decompressed (the gzip trailer's ISIZE, RFC 1952 section 2.3.1: the size
    modulo 2**32, exact below 4 GiB), i.e. a body the dashboard refuses whatever it says."""
    if len(body_gz) > MAX_REPORT_BYTES:
        return True
    return len(body_gz) >= 18 and int.from_bytes(body_gz[-4:], "little") > MAX_REPORT_BYTES


def post_report(client: httpx.Client, server_url: str, token: str, body_gz: bytes) -> PostResult:
    """POST one gzipped report and classify the answer (never raises for network errors)."""
    try:
        response = client.post(
            server_url.rstrip("/") + REPORTS_PATH, content=body_gz,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                     "Content-Encoding": "gzip"})
    except httpx.HTTPError as exc:
        return PostResult("transient", None, f"{type(exc).__name__}: {exc}")
    status = response.status_code
    detail = response.text[:2000]
    if status in (200, 201, 202):
        return PostResult("delivered", status, "", probes=probe_requests(response.text),
                          metrics_text=metrics_text_requests(response.text),
                          reads_compact=reads_compact(response.text))
    if status == 502 and over_the_cap(body_gz):
        return PostResult("rejected", status, f"over the {MAX_REPORT_BYTES}-byte report cap "
                          f"(the proxy answered 502 for it): {detail}")
    if status == 429 or status >= 500:
        return PostResult("transient", status, detail,
                          retry_after_seconds(response.headers.get("Retry-After")))
    if status in (401, 403):
        return PostResult("auth", status, detail)
    return PostResult("rejected", status, detail)


def probe_requests(answer_text: str) -> dict[str, list[str]]:
    """``{identity: [names]}`` from the report answer's optional ``probes`` list
    (``[{"server": "port:8000", "names": ["stream_control_tokens", ...]}]``).
    Anything malformed is ignored: an older dashboard sends no ``probes`` at all."""
    try:
        answer = json.loads(answer_text)
    except ValueError:
        return {}
    wanted: dict[str, list[str]] = {}
    entries = answer.get("probes") if isinstance(answer, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("server"), str):
            continue
        names = [n for n in entry.get("names") or [] if isinstance(n, str) and n in PROBE_NAMES]
        if names:
            wanted[entry["server"][:255]] = names
    return wanted


def metrics_text_requests(answer_text: str) -> list[str]:
    """Server identities (``port:8000``, ``*`` for all) from the answer's optional
    ``metrics_text`` list: the dashboard wants their raw /metrics text next cycle. Anything
    malformed is ignored (older dashboards send no such key)."""
    try:
        answer = json.loads(answer_text)
    except ValueError:
        return []
    wanted = answer.get("metrics_text") if isinstance(answer, dict) else None
    if not isinstance(wanted, list):
        return []
    return [w[:255] for w in wanted[:128] if isinstance(w, str)]


def reads_compact(answer_text: str) -> bool:
    """Whether the report answer says the dashboard derives from the compact /metrics form
    (``"metrics_compact": true``); False for older dashboards and anything malformed."""
    try:
        answer = json.loads(answer_text)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("metrics_compact") is True


def backoff_delay(attempt: int, rng: random.Random | None = None) -> float:
    """Delay before attempt ``attempt + 1`` (seconds): ``BASE * 2**attempt * U[0.5, 1.5)``."""
    rng = rng or random.Random()
    return min(MAX_DELAY_S, BASE_DELAY_S * (2 ** attempt) * (0.5 + rng.random()))


class Deliverer:
    """Drains a :class:`Spool` to the dashboard; ``stop`` interrupts backoff waits."""

    def __init__(self, spool: Spool, server_url: str, token: str,
                 stop: threading.Event | None = None, client: httpx.Client | None = None):
        self.spool = spool
        self.server_url = server_url
        self.token = token
        self.stop = stop or threading.Event()
        self.client = client or make_client()
        #: Probes asked for in report answers, run (and cleared) by the next cycle.
        self.probe_requests: dict[str, list[str]] = {}
        #: Servers whose raw /metrics text was asked for, sent (and cleared) next cycle.
        self.metrics_text_requests: set[str] = set()
        #: Whether the dashboard said it derives from the compact form (then the text may go).
        self.reads_compact = False

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def drain(self, budget_s: float) -> dict[str, int | str | None]:
        """Send spooled reports oldest-first for at most ``budget_s`` seconds.

        Returns ``{"delivered", "rejected", "pending", "outcome", "status", "detail"}``
        and records the last outcome in the state file.
        """
        deadline = time.monotonic() + budget_s
        counts = {"delivered": 0, "rejected": 0}
        last: PostResult | None = None
        not_before = self.spool.state.read().get("not_before", 0)
        if isinstance(not_before, int | float) and time.time() < not_before:
            # the dashboard asked (Retry-After) for a pause longer than one cycle
            return {**counts, "pending": self.spool.depth(), "outcome": "waiting",
                    "status": None, "detail": f"Retry-After until {not_before:.0f}"}
        for entry in self.spool.entries():
            if self.stop.is_set():
                break
            last = self._send_one(entry, deadline)
            if last.kind == "delivered":
                counts["delivered"] += 1
                if last.probes:
                    self.probe_requests.update(last.probes)
                self.metrics_text_requests.update(last.metrics_text)
                self.reads_compact = self.reads_compact or last.reads_compact
            elif last.kind == "rejected":
                counts["rejected"] += 1
            else:
                break  # transient or auth: keep the rest in order for the next cycle
        summary = {**counts, "pending": self.spool.depth(),
                   "outcome": last.kind if last else "idle",
                   "status": last.status if last else None,
                   "detail": last.detail[:500] if last else None}
        self.spool.state.update(last_delivery={**summary,
                                               "at": datetime.now(timezone.utc).isoformat()})
        return summary

    def _send_one(self, entry: SpoolEntry, deadline: float) -> PostResult:
        body = self.spool.read(entry)
        if body is None:
            return PostResult("delivered", None, "already gone")
        result = PostResult("transient", None, "not attempted")
        for attempt in range(MAX_ATTEMPTS):
            result = post_report(self.client, self.server_url, self.token, body)
            if result.status in _POISON_STATUSES and self._count_server_error(entry):
                result = PostResult("rejected", result.status,
                                    f"{MAX_SERVER_ERRORS} server errors: {result.detail}")
            if result.kind in ("delivered", "rejected"):
                self._finish(entry, result)
                return result
            if result.kind == "auth":
                log.error("dashboard refused the token (HTTP %s): %s; keeping %s in the spool",
                          result.status, result.detail, entry.report_id)
                return result
            delay = result.retry_after_s if result.retry_after_s is not None \
                else backoff_delay(attempt)
            if time.monotonic() + delay > deadline:
                if result.retry_after_s is not None:
                    self.spool.state.update(not_before=time.time() + result.retry_after_s)
                break
            if attempt + 1 >= MAX_ATTEMPTS:
                break
            log.warning("delivery of %s failed (%s %s); retrying in %.1fs", entry.report_id,
                        result.status or "", result.detail[:200], delay)
            if self.stop.wait(delay):
                break
        return result

    def _count_server_error(self, entry: SpoolEntry) -> bool:
        """Count one HTTP 500 for ``entry`` in the state file (kept only for reports still
        spooled); True once it reached :data:`MAX_SERVER_ERRORS`."""
        counts = self.spool.state.read().get("server_errors")
        counts = counts if isinstance(counts, dict) else {}
        spooled = {e.report_id for e in self.spool.entries()}
        counts = {k: v for k, v in counts.items() if k in spooled and isinstance(v, int)}
        counts[entry.report_id] = counts.get(entry.report_id, 0) + 1
        self.spool.state.update(server_errors=counts)
        return counts[entry.report_id] >= MAX_SERVER_ERRORS

    def _finish(self, entry: SpoolEntry, result: PostResult) -> None:
        if result.kind == "rejected":
            kept = self.spool.set_aside(entry)
            log.error("dashboard rejected report %s with HTTP %s: %s; moved to %s",
                      entry.report_id, result.status, result.detail, kept)
            return
        self.spool.remove(entry)


def enroll_request(server_url: str, secret: str, machine_id: str, hostname: str,
                   previous_token: str | None = None,
                   client: httpx.Client | None = None) -> dict:
    """Exchange an enrollment secret for a host token (``POST /api/v1/enroll``).

    ``previous_token``: the token this machine holds (re-install); the dashboard replaces it
    without an admin's approval when it is still live. Returns the answer
    ``{"token", "host", "machine_id", "pending"}``; ``pending`` True (HTTP 202) means the
    token works once an admin approves the re-enrollment. Raises ``RuntimeError`` with the
    server's answer when refused or unreachable.
    """
    own = client is None
    client = client or make_client()
    body = {"secret": secret, "machine_id": machine_id, "hostname": hostname}
    if previous_token:
        body["previous_token"] = previous_token
    try:
        response = client.post(server_url.rstrip("/") + ENROLL_PATH, json=body)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"enrollment failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            client.close()
    if response.status_code not in (200, 201, 202):
        raise RuntimeError(f"enrollment refused: HTTP {response.status_code}: "
                           f"{response.text[:500]}")
    try:
        answer = response.json()
    except json.JSONDecodeError as exc:
        raise RuntimeError("enrollment answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise RuntimeError(f"enrollment answer is a {type(answer).__name__}, not an object")
    token = answer.get("token") or answer.get("host_token")
    if not isinstance(token, str) or not token:
        raise RuntimeError(f"enrollment answer has no token: keys {sorted(answer)[:10]}")
    return {**answer, "token": token,
            "pending": bool(answer.get("pending")) or response.status_code == 202}


def enroll(server_url: str, secret: str, machine_id: str, hostname: str,
           client: httpx.Client | None = None) -> str:
    """The token of :func:`enroll_request` (pending or not)."""
    return enroll_request(server_url, secret, machine_id, hostname, client=client)["token"]


def revoke(server_url: str, token: str, client: httpx.Client | None = None) -> bool:
    """Revoke ``token`` on the dashboard (``POST /api/v1/revoke``, uninstall); True when the
    dashboard confirmed or already did not know the token (401). Raises ``RuntimeError``
    when unreachable or on another answer."""
    own = client is None
    client = client or make_client()
    try:
        response = client.post(server_url.rstrip("/") + REVOKE_PATH,
                               headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise RuntimeError(f"revoke failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            client.close()
    if response.status_code in (200, 401):
        return True
    raise RuntimeError(f"revoke refused: HTTP {response.status_code}: {response.text[:500]}")
