"""Stopping the simulator: SIGTERM ends ``manage.py simulate_fleet`` within seconds and frees
the webhook receiver's port, also on a re-run whose story is already over (``make demo``'s
Ctrl-C used to hang there for good, with DEMO_HOOK_PORT held).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"simulator exited early:\n{log.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in the simulator's output:\n{log.read_text()}")


def test_sigterm_stops_a_story_over_simulator_within_seconds_and_frees_its_port(
        eager_dashboard: str, tmp_path: Path):
    sim_dir = tmp_path / "sim"
    sim_dir.mkdir()
    # A re-run an hour after the first: every event applied, the final state held.
    (sim_dir / "epoch.json").write_text(json.dumps({"epoch": time.time() - 3600}))
    port = _free_port()
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": (f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}"
                                          f":{db['PORT'] or 5432}/{db['NAME']}")}
    log = tmp_path / "simulator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv
            [sys.executable, "manage.py", "simulate_fleet", "--url", eager_dashboard,
             "--sim-dir", str(sim_dir), "--no-cases", "--no-beat", "--wait", "20",
             "--receiver-port", str(port), "--receiver-dir", str(tmp_path / "hook")],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Start-up (Django, 8 emulators, enrollment) is slow on a loaded machine: wait on it.
        _wait_for_line(log, "story over", proc, 180)
        _wait_for_line(log, "round 1:", proc, 180)
        assert not _port_free(port)  # the receiver listens
        time.sleep(1.0)  # between rounds: waiting on the stop event
        proc.send_signal(signal.SIGTERM)
        # Within seconds, not at the next round 30 s on (nor never): 20 s leaves a loaded
        # machine room to stop the emulators and exit.
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, log.read_text()
    assert "Simulation stopped after" in log.read_text()
    assert _port_free(port)


def _raise_timeout(*_: object) -> None:
    raise TimeoutError("the SIGTERM handler deadlocked on the stop event's lock")


def test_sigterm_arriving_while_the_stop_event_lock_is_held_still_stops_the_simulator():
    """Python runs a signal handler in the main thread between two bytecodes, possibly inside
    ``stop.wait()`` with the Event's lock held; setting the Event right there deadlocked."""
    from demo.management.commands.simulate_fleet import install_stop_handlers

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
    stop = threading.Event()
    try:
        install_stop_handlers(stop)
        signal.signal(signal.SIGALRM, _raise_timeout)
        signal.alarm(5)
        with stop._cond:  # what Event.wait() holds around its waits
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, lock held
        assert stop.wait(timeout=3)
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal right after: the same request
        time.sleep(0.1)
    finally:
        signal.alarm(0)
        for sig, handler in before.items():
            signal.signal(sig, handler)
