"""HTTP calls to one vLLM server: ``/version``, ``/v1/models``, ``/metrics``.

Endpoints and auth: ``docs/vllm-facts.md`` section 2 (``/version`` and
``/metrics`` are never behind ``--api-key``; ``/v1/*`` needs ``Authorization: Bearer``
when a key is set). Every failure becomes one line in ``errors``; nothing raises.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

from fleet_agent.schema import MAX_METRICS_CHARS, MAX_MODELS, PG_INTEGER_MAX

#: Seconds: a local server that does not accept within 2 s is down or overloaded.
CONNECT_TIMEOUT_S = 2.0
#: Seconds: a busy server's /metrics can take a moment to render.
READ_TIMEOUT_S = 5.0
#: Seconds for all three endpoints of one server, reads included: a server that answers one
#: byte per read timeout (a stalled or hostile local process) is cut off here, so it cannot
#: hold the cycle (each read alone would wait only READ_TIMEOUT_S, forever in a row).
SCRAPE_DEADLINE_S = 15.0
#: Largest /metrics body read, bytes (the report limit is 4 MiB for the whole host); the
#: body is streamed and reading stops there, so a 400 MB answer never sits in memory.
MAX_METRICS_BYTES = MAX_METRICS_CHARS
#: Largest /v1/models or /version body read, bytes: a card is ~300 bytes, so this parses
#: tens of thousands of models (then cut to MAX_MODELS); a larger body is not read at all.
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024


@dataclass
class ProbeResult:
    """What the endpoints answered; ``models`` as ``{"id", "root", "max_model_len"}`` dicts."""

    version: str | None = None
    models: list[dict[str, Any]] = field(default_factory=list)
    metrics_text: str | None = None
    scraped_at: datetime | None = None
    errors: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process: loading the CA bundle costs ~50 ms CPU, which
    would otherwise be paid per server per cycle (measured by bench/agent_cycle.py)."""
    return ssl.create_default_context()


@functools.lru_cache(maxsize=1)
def _no_tls_context() -> ssl.SSLContext:
    """For plain ``http://``/``unix:`` servers, where TLS never happens: verifying, but with no
    CA loaded, so it costs nothing to build and would refuse any certificate if ever used."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def make_client(base_url: str) -> httpx.Client:
    """A client for ``http(s)://host:port`` or ``unix:/path.sock`` (``--uds``)."""
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    if base_url.startswith("unix:"):
        transport = httpx.HTTPTransport(uds=base_url[len("unix:"):], verify=_no_tls_context())
        return httpx.Client(transport=transport, base_url="http://localhost", timeout=timeout,
                            trust_env=False)
    context = _ssl_context() if base_url.startswith("https:") else _no_tls_context()
    return httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, trust_env=False,
                        verify=context)


@dataclass
class Body:
    """A capped response body: ``data`` holds at most the cap; ``cut`` when more was sent."""

    data: bytes
    cut: bool

    def text(self) -> str:
        """UTF-8 text (undecodable bytes replaced)."""
        return self.data.decode("utf-8", errors="replace")


class DeadlineExceeded(httpx.TimeoutException):
    """The overall deadline passed while a body was still arriving."""


def read_capped(response: httpx.Response, max_bytes: int,
                deadline: float | None = None) -> Body:
    """Read a streamed ``response`` up to ``max_bytes``, then stop (the rest is never read).

    ``deadline`` (``time.monotonic()`` value): raises :class:`DeadlineExceeded` once it has
    passed between two chunks, however steadily they come."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineExceeded("overall deadline passed while reading the body")
        room = max_bytes - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return Body(b"".join(chunks), True)
        chunks.append(chunk)
        size += len(chunk)
    return Body(b"".join(chunks), False)


def _get(client: httpx.Client, path: str, errors: list[str],
         headers: dict[str, str] | None = None,
         max_bytes: int = MAX_JSON_BODY_BYTES, deadline: float | None = None) -> Body | None:
    """GET ``path`` and read at most ``max_bytes`` of the body; None (and one line in
    ``errors``) on a transport error, a status other than 200, or ``deadline`` (monotonic)
    passed before the body was read."""
    left = READ_TIMEOUT_S if deadline is None else deadline - time.monotonic()
    if left <= 0:
        errors.append(f"GET {path}: skipped, the server's {SCRAPE_DEADLINE_S:g} s deadline "
                      "passed")
        return None
    timeout = httpx.Timeout(min(READ_TIMEOUT_S, left), connect=min(CONNECT_TIMEOUT_S, left))
    try:
        with client.stream("GET", path, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                hint = " (api key required: set api_key for this server in the agent config)" \
                    if response.status_code in (401, 403) and path.startswith("/v1") else ""
                errors.append(f"GET {path}: HTTP {response.status_code}{hint}")
                return None
            return read_capped(response, max_bytes, deadline)
    except DeadlineExceeded:
        errors.append(f"GET {path}: not answered within the server's {SCRAPE_DEADLINE_S:g} s "
                      "deadline")
        return None
    except httpx.TimeoutException as exc:
        errors.append(f"GET {path}: timed out ({type(exc).__name__})")
        return None
    except httpx.HTTPError as exc:
        errors.append(f"GET {path}: {type(exc).__name__}: {exc}")
        return None


def _json(body: Body, path: str, errors: list[str]) -> Any:
    if body.cut:
        errors.append(f"GET {path}: body larger than {MAX_JSON_BODY_BYTES} bytes, not read")
        return None
    try:
        return json.loads(body.data)
    except (ValueError, RecursionError):
        errors.append(f"GET {path}: body is not JSON")
        return None


def probe(base_url: str, api_key: str | None = None,
          deadline_s: float | None = None) -> ProbeResult:
    """Query the three endpoints of the server at ``base_url``, all within ``deadline_s``
    seconds (default :data:`SCRAPE_DEADLINE_S`; an endpoint not answered by then is an
    error line, the others are kept)."""
    result = ProbeResult()
    deadline = time.monotonic() + (SCRAPE_DEADLINE_S if deadline_s is None else deadline_s)
    with make_client(base_url) as client:
        _version(client, result, deadline)
        if result.errors and ("timed out" in result.errors[-1]
                              or "deadline" in result.errors[-1]):
            # Bound but not serving (model still loading): the other calls would time out too.
            result.errors.append("GET /v1/models, /metrics: skipped, /version timed out")
            return result
        _models(client, result, api_key, deadline)
        _metrics(client, result, deadline)
    return result


def _version(client: httpx.Client, result: ProbeResult, deadline: float | None = None) -> None:
    response = _get(client, "/version", result.errors, deadline=deadline)
    body = _json(response, "/version", result.errors) if response is not None else None
    if isinstance(body, dict) and isinstance(body.get("version"), str):
        result.version = body["version"]
    elif response is not None and body is not None:
        result.errors.append("GET /version: no version field")


def _models(client: httpx.Client, result: ProbeResult, api_key: str | None,
            deadline: float | None = None) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    response = _get(client, "/v1/models", result.errors, headers, deadline=deadline)
    body = _json(response, "/v1/models", result.errors) if response is not None else None
    if body is None:
        return
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        result.errors.append("GET /v1/models: no data list")
        return
    if len(data) > MAX_MODELS:
        result.errors.append(f"GET /v1/models: {len(data)} models, the first {MAX_MODELS} kept")
    for card in data[:MAX_MODELS]:
        if isinstance(card, dict) and isinstance(card.get("id"), str) and card["id"]:
            mml = card.get("max_model_len")
            root = card.get("root")
            result.models.append({
                "id": card["id"][:512],
                "root": root[:512] if isinstance(root, str) else None,
                "max_model_len": mml if isinstance(mml, int) and 1 <= mml <= PG_INTEGER_MAX
                else None,
            })


def _metrics(client: httpx.Client, result: ProbeResult, deadline: float | None = None) -> None:
    body = _get(client, "/metrics", result.errors, max_bytes=MAX_METRICS_BYTES,
                deadline=deadline)
    if body is None:
        return
    result.scraped_at = datetime.now(timezone.utc)
    text = body.text()
    if body.cut:
        result.errors.append(f"GET /metrics: body over {MAX_METRICS_BYTES} bytes, cut there")
        text = text[:MAX_METRICS_BYTES].rsplit("\n", 1)[0] + "\n"
    result.metrics_text = text
