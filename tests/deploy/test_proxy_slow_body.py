"""Slow-body denial of service, black box through the deployed proxy.

gunicorn's sync workers (production: ``Dockerfile``'s CMD) read a request body themselves, so
a client that announces ``Content-Length: 100000``, sends 12 bytes and stalls holds a worker
until gunicorn's timeout. ``deploy/Caddyfile`` is meant to stop that: Caddy buffers the whole
body under its ``read_body`` timeout and only a complete request reaches a worker. These tests
run the real gunicorn (``config.wsgi``, sync workers) and the real Caddy with
``deploy/Caddyfile``, more slow clients than workers, and time a normal request.

Caddy comes from the system (Debian: ``apt-get install -y caddy``, 2.6.2; ``.ci/run`` installs
it); a missing binary fails the tests with that command. The Caddyfile is the deployed one,
rendered by :func:`render_caddyfile` (ports, no admin socket, and 2.6's spelling of the body
buffer): compose runs ``caddy:2.8-alpine``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CADDYFILE = ROOT / "deploy" / "Caddyfile"
INSTALL_CADDY = "apt-get install -y caddy"
#: Sync workers of the gunicorn under test; the slow clients outnumber them.
WORKERS = 2
SLOW_CLIENTS = WORKERS + 3
#: What a slow client sends: headers announcing 100000 bytes, then 12 bytes of JSON.
ANNOUNCED_BYTES = 100_000
SENT = b'{"secret": "'
#: A normal request must be answered within this many seconds (it takes milliseconds).
PROMPT_S = 5.0
START_TIMEOUT_S = 45


def _read_body_timeout_s() -> float:
    """``servers { timeouts { read_body <n>s } }`` of the deployed Caddyfile, in seconds."""
    match = re.search(r"^\s*read_body\s+(\d+)s\s*$", CADDYFILE.read_text(), re.M)
    assert match, f"{CADDYFILE} sets no read_body timeout"
    return float(match.group(1))


#: The slow clients give up after this long: the proxy must have cut them well before.
GIVE_UP_S = _read_body_timeout_s() + 30


def _caddy() -> tuple[str, Version]:
    path = shutil.which("caddy")
    if path is None:
        pytest.fail(f"caddy is not installed; install it with `{INSTALL_CADDY}` "
                    "(.ci/run does)", pytrace=False)
    out = subprocess.run([path, "version"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    assert match, f"unreadable `caddy version`: {out!r}"
    return path, Version(match.group(0))


def render_caddyfile(version: Version, upstream: str) -> str:
    """``deploy/Caddyfile`` as the test runs it: the upstream ``web:8000`` (compose's service)
    replaced by ``upstream``, no admin endpoint (several runs may share the machine), and on
    Caddy < 2.7 ``request_buffers unlimited`` spelled ``buffer_requests``.

    Why the last one: 2.7 renamed reverse_proxy's ``buffer_requests`` (read the whole body
    before proxying, no cap) to ``request_buffers <size>``, whose ``unlimited`` is the same
    thing; 2.6 (Debian's) knows only the old name. The site address is ``{$SITE_URL}``, set in
    Caddy's environment. Each replacement must hit exactly once, so a changed Caddyfile fails
    here instead of being tested half-rendered.
    """
    text = CADDYFILE.read_text()

    def once(old: str, new: str) -> None:
        nonlocal text
        assert text.count(old) == 1, f"{CADDYFILE}: expected one {old!r}"
        text = text.replace(old, new)

    once("reverse_proxy web:8000 {", f"reverse_proxy {upstream} {{")
    once("{\n\tservers {", "{\n\tadmin off\n\tservers {")
    if version < Version("2.7"):
        once("request_buffers unlimited", "buffer_requests")
    return text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class _Process:
    """A started server in its own session; output in ``log``; SIGKILLed with its group."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, health_url: str):
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(health_url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{argv[0]} did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)


@pytest.fixture
def gunicorn(tmp_path: Path, transactional_db: None) -> Iterator[tuple[str, Path]]:
    """Production's gunicorn (``config.wsgi``, sync workers, 60 s timeout) on the test
    database; yields its base URL and its access log."""
    from django.db import connection

    db = connection.settings_dict
    port = _free_port()
    user = db.get("USER") or "postgres"
    auth = f"{user}:{db['PASSWORD']}" if db.get("PASSWORD") else user
    host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    env = {**os.environ, "DEBUG": "false", "SECRET_KEY": "proxy-test",
           "DATABASE_URL": f"postgres://{auth}@{host}/{db['NAME']}",
           "ENROLL_BURST": "1000", "ENROLL_RATE": "1000/s", "LOG_LEVEL": "WARNING"}
    access = tmp_path / "access.log"
    url = f"http://127.0.0.1:{port}"
    server = _Process([sys.executable, "-m", "gunicorn", "config.wsgi", "--bind",
                       f"127.0.0.1:{port}", "--workers", str(WORKERS), "--worker-class", "sync",
                       "--timeout", "60", "--access-logfile", str(access)],
                      env, tmp_path / "gunicorn.log", url + "/api/v1/health")
    try:
        yield url, access
    finally:
        server.stop()


@pytest.fixture
def proxy(tmp_path: Path, gunicorn: tuple[str, Path]) -> Iterator[str]:
    """Caddy with the rendered deploy/Caddyfile in front of :func:`gunicorn`; its URL."""
    caddy, version = _caddy()
    config = tmp_path / "Caddyfile"
    config.write_text(render_caddyfile(version, gunicorn[0].removeprefix("http://")))
    url = f"http://127.0.0.1:{_free_port()}"
    home = tmp_path / "caddy-home"  # certificates/state Caddy would write under $HOME
    env = {**os.environ, "SITE_URL": url, "HOME": str(home),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
    server = _Process([caddy, "run", "--config", str(config), "--adapter", "caddyfile"],
                      env, tmp_path / "caddy.log", url + "/api/v1/health")
    try:
        yield url
    finally:
        server.stop()


class SlowClient(threading.Thread):
    """One connection that announces :data:`ANNOUNCED_BYTES`, sends :data:`SENT` and stalls
    until the server closes it or :data:`GIVE_UP_S` pass. ``cut_after_s``: seconds from the
    12 bytes to the server's close (None: the client gave up); ``answer``: what it got."""

    def __init__(self, base_url: str):
        super().__init__(daemon=True)
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(f"POST /api/v1/enroll HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          "Content-Type: application/json\r\n"
                          f"Content-Length: {ANNOUNCED_BYTES}\r\n\r\n".encode() + SENT)
        self.sent_at = time.monotonic()
        self.cut_after_s: float | None = None
        self.answer = b""
        self.start()

    def run(self) -> None:
        self.sock.settimeout(GIVE_UP_S)
        try:
            while chunk := self.sock.recv(4096):
                self.answer += chunk
            self.cut_after_s = time.monotonic() - self.sent_at
        except TimeoutError:
            pass
        except OSError:  # reset by the server: cut as well
            self.cut_after_s = time.monotonic() - self.sent_at

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _timed_health(base_url: str) -> tuple[float, int | None]:
    """Seconds a ``GET /api/v1/health`` takes (capped near 2 x PROMPT_S) and its status
    (None when it timed out)."""
    start = time.monotonic()
    try:
        status = httpx.get(base_url + "/api/v1/health", timeout=2 * PROMPT_S).status_code
    except httpx.TimeoutException:
        status = None
    return time.monotonic() - start, status


def test_without_the_proxy_slow_bodies_starve_gunicorn(gunicorn):
    """The threat the proxy exists for (and the premise of the test below): straight to
    gunicorn, a few stalled bodies leave no worker for anyone else."""
    url, _ = gunicorn
    slow = [SlowClient(url) for _ in range(SLOW_CLIENTS)]
    try:
        time.sleep(1)  # the workers are now blocked reading those bodies
        took, status = _timed_health(url)
    finally:
        for client in slow:
            client.close()
    assert status is None and took >= PROMPT_S, (took, status)


def test_through_the_proxy_a_normal_request_is_answered_while_slow_bodies_are_cut(
        gunicorn, proxy):
    _, access_log = gunicorn
    slow = [SlowClient(proxy) for _ in range(SLOW_CLIENTS)]
    try:
        time.sleep(1)
        took, status = _timed_health(proxy)
        assert status == 200 and took < PROMPT_S, (took, status)
        # While the bodies stall, none of those requests has reached a worker.
        assert "/api/v1/enroll" not in access_log.read_text()

        for client in slow:
            client.join(GIVE_UP_S + 5)
    finally:
        for client in slow:
            client.close()
    read_body = _read_body_timeout_s()
    for client in slow:
        # Cut by Caddy's body read timeout: not before it, and well before the client quits.
        assert client.cut_after_s is not None, "the proxy never cut a stalled body"
        assert read_body - 2 <= client.cut_after_s < GIVE_UP_S - 10, client.cut_after_s
    # Caddy 2.7+ then forwards the 12 bytes it had, with Content-Length rewritten to 12 (its
    # unlimited buffer drops the read error); 2.6 forwards nothing. Either way a cut body is
    # answered at once and refused, never processed as a request.
    time.sleep(1)
    forwarded = re.findall(r'"POST /api/v1/enroll [^"]*" (\d{3}) ', access_log.read_text())
    assert all(code.startswith("4") for code in forwarded), forwarded
