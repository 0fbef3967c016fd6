"""An over-size report is refused by the proxy itself, never a 502 (black box through Caddy).

Ingest answers a body past its cap (``MAX_REPORT_BYTES``) with 413 as soon as it reads the
Content-Length, without reading the body; Caddy, still writing the buffered body to
gunicorn, then got a broken pipe and answered the agent 502 ("proxy error", which an agent
retries). ``deploy/Caddyfile``'s ``request_body { max_size }`` now sits at the cap, so Caddy
answers 413 itself and gunicorn never sees the body. Runs the real Caddy and gunicorn of
:mod:`test_proxy_slow_body`.
"""

from __future__ import annotations

import re

import httpx
import pytest
from test_proxy_slow_body import CADDYFILE, gunicorn, proxy  # noqa: F401 - fixtures

from fleet_agent.schema import MAX_REPORT_BYTES

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: Caddy's size units (go-humanize ParseBytes): KiB/MiB are powers of 1024, KB/MB of 1000.
_UNITS = {"KIB": 1 << 10, "MIB": 1 << 20, "KB": 10**3, "MB": 10**6, "B": 1}


def _max_size() -> int:
    match = re.search(r"^\s*max_size\s+(\d+)([KMB]i?B?)\s*$", CADDYFILE.read_text(), re.M)
    assert match, f"{CADDYFILE} sets no request_body max_size"
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def test_the_cap_leaves_room_only_for_gzips_own_overhead() -> None:
    """A 4 MiB report that does not compress grows by gzip's header and block overhead
    (RFC 1952; deflate stored blocks: 5 bytes per 64 KiB) and must still pass."""
    assert MAX_REPORT_BYTES < _max_size() <= MAX_REPORT_BYTES + 64 * 1024


@pytest.mark.parametrize("size", [4_200_000, 5 << 20, 9 << 20])
def test_a_body_over_the_cap_is_a_413_from_the_proxy(proxy: str, size: int) -> None:  # noqa: F811
    for _ in range(3):  # the broken pipe was a race: try it more than once
        response = httpx.post(proxy + "/api/v1/reports", content=b"x" * size, timeout=60,
                              headers={"Authorization": "Bearer not-a-token",
                                       "Content-Type": "application/json"})
        assert response.status_code == 413, (response.status_code, response.text[:300])
        assert "4 MiB report cap" in response.text  # Caddy's answer, not gunicorn's


def test_a_body_at_the_cap_still_reaches_ingest(proxy: str) -> None:  # noqa: F811
    response = httpx.post(proxy + "/api/v1/reports", content=b"x" * MAX_REPORT_BYTES,
                          timeout=60, headers={"Authorization": "Bearer not-a-token",
                                               "Content-Type": "application/json"})
    assert response.status_code == 401  # ingest's answer: the token, not the size
