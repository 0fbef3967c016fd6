"""Real processes for the fault tests, each bounded, loopback-only and always stopped.

- :class:`Proc`: a subprocess in its own session (so a SIGKILL reaches its children)
  with its output in a log file;
- :class:`Dashboard`: the real WSGI app under gunicorn on a random 127.0.0.1 port;
- :class:`Worker`: ``celery worker`` on the app of ``fault_worker_app``;
- :class:`PrivateRedis` / :class:`PrivatePostgres`: throw-away servers on random ports,
  so stopping them never touches the machine's shared Redis or PostgreSQL;
- :class:`Agent`: the real ``fleet-agent run`` on a fake node (``tests/agent``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from fa_fakenode import FakeNode  # noqa: E402

from fleet_agent import config as agent_config  # noqa: E402
from fleet_agent.spool import Spool, StateFile  # noqa: E402

#: Seconds a process gets to come up (gunicorn imports Django and loads the rules): generous,
#: as CI runs on a loaded 2-core machine; a process that is up ends the wait at once.
START_TIMEOUT_S = 120
#: Longest wait, seconds, for a condition a test expects (reports stored, evaluated, sent):
#: a failing test may be slow, a passing one stops waiting as soon as the condition holds.
WAIT_S = 120
#: Machine id of the fake node (``fa_fakenode.FakeNode`` writes it to etc/machine-id).
FAKE_MACHINE_ID = "0123456789abcdef0123456789abcdef"


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll ``predicate`` until truthy (True) or ``timeout_s`` seconds pass (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def database_url(settings_dict: dict[str, Any]) -> str:
    """``postgres://`` URL of a Django database settings dict (the pytest test database)."""
    user = settings_dict.get("USER") or "postgres"
    auth = f"{user}:{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else user
    host, port = settings_dict.get("HOST") or "127.0.0.1", settings_dict.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{settings_dict['NAME']}"


def server_env(db_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """Environment of a dashboard or worker process: test database and broker, no
    rate limit in the way of a replaying agent, alerts grouped for 1 s only."""
    return {**os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url,
            "SECRET_KEY": "fault-tests", "DEBUG": "false", "LOG_LEVEL": "INFO",
            "INGEST_RATE": "1000/s", "INGEST_BURST": "1000", "ALERT_GROUP_WINDOW_S": "1",
            "ALERTS_ALLOW_PRIVATE_WEBHOOKS": "true",
            "PYTHONPATH": f"{HERE}{os.pathsep}{ROOT}", **extra}


def run_django(env: dict[str, str], code: str) -> str:
    """Run Python ``code`` in a fresh process with Django set up from ``env``; its stdout.

    Raises subprocess.CalledProcessError (with the output) when it fails.
    """
    setup = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', " \
            "'config.settings'); django.setup()\n"
    return subprocess.run([sys.executable, "-c", setup + code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=WAIT_S).stdout


class Proc:
    """A subprocess in a new session; output goes to ``log``."""

    def __init__(self, argv: list[str], env: dict[str, str] | None, log: Path,
                 user: str | None = None):
        self.argv, self.env, self.log, self.user = argv, env, log, user
        self.proc: subprocess.Popen | None = None

    def start(self) -> Proc:
        """Start (again); the log is appended to."""
        argv = ["runuser", "-u", self.user, "--", *self.argv] if self.user else self.argv
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def text(self) -> str:
        """The whole log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill9(self) -> None:
        """SIGKILL the whole process group: no cleanup, no acks, no goodbyes."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s`` seconds."""
        if not self.alive:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()


class Dashboard(Proc):
    """``gunicorn`` serving ``fault_wsgi`` (the project's WSGI app) on a random port."""

    def __init__(self, env: dict[str, str], log: Path, retry_after_s: int = 2):
        self.port = free_port()
        env = {**env, "FAULT_RETRY_AFTER_S": str(retry_after_s)}
        super().__init__([sys.executable, "-m", "gunicorn", "fault_wsgi:application",
                          "--bind", f"127.0.0.1:{self.port}", "--workers", "2",
                          "--timeout", "30", "--graceful-timeout", "5"], env, log)

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Dashboard:
        """Start and wait until it answers HTTP (any status: the database may be down)."""
        super().start()
        if not wait_for(self._answers, START_TIMEOUT_S, 0.2):
            self.kill9()
            raise RuntimeError(f"gunicorn did not come up:\n{self.text()[-3000:]}")
        return self

    def _answers(self) -> bool:
        if not self.alive:
            raise RuntimeError(f"gunicorn exited:\n{self.text()[-3000:]}")
        try:
            httpx.get(self.url + "/api/v1/health", timeout=2)
        except httpx.HTTPError:
            return False
        return True


class Worker(Proc):
    """``celery -A fault_worker_app worker -Q <queues>``, one task at a time: ``solo``
    runs it in the worker process, ``prefork`` in one pool child (production's pool)."""

    def __init__(self, env: dict[str, str], log: Path, name: str, queues: str = "evaluate",
                 pool: str = "solo"):
        super().__init__([sys.executable, "-m", "celery", "-A", "fault_worker_app", "worker",
                          "-Q", queues, "--pool", pool, "--concurrency", "1",
                          "--without-gossip", "--without-mingle", "--without-heartbeat",
                          "--loglevel", "INFO", "-n", f"{name}-{os.getpid()}@%h"], env, log)

    def children(self) -> list[int]:
        """Pids of the worker's direct children (the prefork pool processes)."""
        if not self.alive:
            return []
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def start(self) -> Worker:
        """Start and wait for Celery's ``ready.`` line."""
        offset = len(self.text())
        super().start()
        ready = wait_for(lambda: "ready." in self.text()[offset:] or not self.alive,
                         START_TIMEOUT_S, 0.2)
        if not ready or not self.alive:
            self.kill9()
            raise RuntimeError(f"worker did not start:\n{self.text()[-3000:]}")
        return self


class PrivateRedis(Proc):
    """A throw-away ``redis-server`` on a random port, no persistence (a restart empties it)."""

    def __init__(self, log: Path):
        self.port = free_port()
        binary = shutil.which("redis-server") or "redis-server"
        super().__init__([binary, "--port", str(self.port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--daemonize", "no"], None, log)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        """Start and wait until it answers PING."""
        import redis

        super().start()
        client = redis.Redis(port=self.port, socket_connect_timeout=1)

        def pong() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False
        if not wait_for(pong, START_TIMEOUT_S):
            raise RuntimeError(f"redis-server did not start:\n{self.text()[-2000:]}")
        return self


def _postgres_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


def _postgres_user() -> str | None:
    """None when not root (run as ourselves); else a non-root account initdb accepts."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgtest", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    return None


def postgres_unavailable() -> str | None:
    """Why a private PostgreSQL cannot run here, or None when it can."""
    if _postgres_bindir() is None:
        return "no PostgreSQL server binaries (initdb/pg_ctl) on this machine"
    if os.geteuid() == 0 and (_postgres_user() is None or shutil.which("runuser") is None):
        return "running as root with no non-root account (or no runuser) to run initdb"
    return None


class PrivatePostgres:
    """A throw-away cluster (initdb, trust auth) on a random port and its own socket dir."""

    def __init__(self) -> None:
        self.bindir = _postgres_bindir()
        self.user = _postgres_user()
        self.dir = Path(tempfile.mkdtemp(prefix="fault-pg-"))
        self.port = free_port()
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def url(self, dbname: str) -> str:
        """``postgres://postgres@127.0.0.1:<port>/<dbname>``."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {result.stdout[-1500:]}{result.stderr[-1500:]}")

    def init(self) -> PrivatePostgres:
        """initdb (superuser ``postgres``, trust auth on loopback)."""
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres")
        return self

    def start(self) -> None:
        """Start and wait until it accepts connections (fsync off: it is thrown away)."""
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-o", opts, "-l",
                  str(self.dir / "server.log"), "-w", "-t", "30", "start")

    def stop(self) -> None:
        """Fast shutdown: open sessions are cut, like a restart of the database host."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        """Stop (immediately) if running and delete the cluster."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if (self.dir / "data" / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w",
                          "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Agent(Proc):
    """The real ``fleet-agent run`` every second on a fake node with one vLLM process."""

    def __init__(self, workdir: Path, server_url: str, token: str | None = None):
        self.node = FakeNode(workdir / "root")
        self.node.add_vllm(["vllm", "serve", "google/gemma-4-31B-it", "--port", "1"],
                           listen=(1,))
        self.config_path = workdir / "agent.toml"
        self.spool_dir = workdir / "spool"
        cfg = agent_config.AgentConfig(server_url=server_url, token=token, interval_s=1,
                                       spool_dir=str(self.spool_dir))
        agent_config.save(cfg, self.config_path)
        binary = shutil.which("fleet-agent", path=str(Path(sys.executable).parent))
        self.command = [binary] if binary else [sys.executable, "-m", "fleet_agent.cli"]
        common = ["--config", str(self.config_path), "--root", str(self.node.root),
                  "--gpu-source", "none"]
        super().__init__([*self.command, "run", *common], None, workdir / "agent.log")
        self.common = common

    def enroll(self, server_url: str, secret: str) -> None:
        """``fleet-agent enroll`` (writes the token into the config file)."""
        subprocess.run([*self.command, "enroll", "--server", server_url, "--secret-file", "-",
                        *self.common], cwd=ROOT, check=True, capture_output=True, timeout=60,
                       input=secret, text=True)

    @property
    def spool(self) -> Spool:
        """The agent's spool (read from the test while the agent runs)."""
        return Spool(self.spool_dir, 1000, 1 << 30, StateFile(self.spool_dir.parent /
                                                                "state.json"))

    def created(self) -> list[str]:
        """report_ids in collection order, from the agent's ``spooled report`` log lines."""
        return re.findall(r"spooled report ([0-9a-f-]{36})", self.text())

    def pending(self) -> list[str]:
        """report_ids still in the spool, oldest first."""
        return [entry.report_id for entry in self.spool.entries()]

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM and insist on a clean exit (status 0)."""
        super().stop(timeout_s)
        assert self.proc is None or self.proc.returncode == 0, self.text()[-3000:]


class Receiver:
    """A local webhook receiver thread: records every POST body and headers, answers 200."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        lock = threading.Lock()
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    received.append(({k.lower(): v for k, v in self.headers.items()},
                                     json.loads(body or b"{}")))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/hook``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def start(self) -> Receiver:
        """Serve in a daemon thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Shut the server down."""
        self.server.shutdown()
        self.server.server_close()
