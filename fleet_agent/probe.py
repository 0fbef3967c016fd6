"""HTTP calls to one vLLM server: ``/version``, ``/v1/models``, ``/metrics``.

Endpoints and auth: ``docs/vllm-facts.md`` section 2 (``/version`` and
``/metrics`` are never behind ``--api-key``; ``/v1/*`` needs ``Authorization: Bearer``
when a key is set). Every failure becomes one line in ``errors``; nothing raises.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

#: Seconds: a local server that does not accept within 2 s is down or overloaded.
CONNECT_TIMEOUT_S = 2.0
#: Seconds: a busy server's /metrics can take a moment to render.
READ_TIMEOUT_S = 5.0
#: Largest /metrics body kept, bytes (the report limit is 4 MiB for the whole host).
MAX_METRICS_BYTES = 3 * 1024 * 1024


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


def _get(client: httpx.Client, path: str, errors: list[str],
         headers: dict[str, str] | None = None) -> httpx.Response | None:
    try:
        response = client.get(path, headers=headers)
    except httpx.TimeoutException as exc:
        errors.append(f"GET {path}: timed out ({type(exc).__name__})")
        return None
    except httpx.HTTPError as exc:
        errors.append(f"GET {path}: {type(exc).__name__}: {exc}")
        return None
    if response.status_code != 200:
        hint = " (api key required: set api_key for this server in the agent config)" \
            if response.status_code in (401, 403) and path.startswith("/v1") else ""
        errors.append(f"GET {path}: HTTP {response.status_code}{hint}")
        return None
    return response


def _json(response: httpx.Response, path: str, errors: list[str]) -> Any:
    try:
        return response.json()
    except ValueError:
        errors.append(f"GET {path}: body is not JSON")
        return None


def probe(base_url: str, api_key: str | None = None) -> ProbeResult:
    """Query the three endpoints of the server at ``base_url``."""
    result = ProbeResult()
    with make_client(base_url) as client:
        _version(client, result)
        if result.errors and "timed out" in result.errors[-1]:
            # Bound but not serving (model still loading): the other calls would time out too.
            result.errors.append("GET /v1/models, /metrics: skipped, /version timed out")
            return result
        _models(client, result, api_key)
        _metrics(client, result)
    return result


def _version(client: httpx.Client, result: ProbeResult) -> None:
    response = _get(client, "/version", result.errors)
    body = _json(response, "/version", result.errors) if response is not None else None
    if isinstance(body, dict) and isinstance(body.get("version"), str):
        result.version = body["version"]
    elif response is not None and body is not None:
        result.errors.append("GET /version: no version field")


def _models(client: httpx.Client, result: ProbeResult, api_key: str | None) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    response = _get(client, "/v1/models", result.errors, headers)
    body = _json(response, "/v1/models", result.errors) if response is not None else None
    if body is None:
        return
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        result.errors.append("GET /v1/models: no data list")
        return
    for card in data:
        if isinstance(card, dict) and isinstance(card.get("id"), str) and card["id"]:
            mml = card.get("max_model_len")
            result.models.append({
                "id": card["id"][:512],
                "root": card.get("root") if isinstance(card.get("root"), str) else None,
                "max_model_len": mml if isinstance(mml, int) and mml >= 1 else None,
            })


def _metrics(client: httpx.Client, result: ProbeResult) -> None:
    response = _get(client, "/metrics", result.errors)
    if response is None:
        return
    result.scraped_at = datetime.now(timezone.utc)
    text = response.text
    if len(text) > MAX_METRICS_BYTES:
        result.errors.append(f"GET /metrics: body of {len(text)} bytes cut to {MAX_METRICS_BYTES}")
        text = text[:MAX_METRICS_BYTES].rsplit("\n", 1)[0] + "\n"
    result.metrics_text = text
