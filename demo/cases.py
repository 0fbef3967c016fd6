"""The real bug reports of ``demo/data/cases/reports`` as vLLM servers (their real command lines).

The one case loader of the project: the demo fleet puts each case on a host of its own
(:mod:`demo.casehosts`) and the agent tests put every case on one fake node
(:func:`place_cases`). Imports no Django, Celery or psycopg and nothing of the dashboard
(tests/test_architecture.py checks), because the agent tests import it.

Conversion rules (``demo/data/cases/README.md``; adapted from ``tests/audit/casekit.py``):
``docker run ... IMAGE ARGS`` and bare ``IMAGE ARGS`` (Kubernetes) lines become the
container's server process with the image recorded; images older than vLLM PR #25967
(2025-10-02, taken as < 0.11.0) start the api_server module, newer ones ``vllm serve``; a
``vllm bench`` line is not a server and is skipped; ``<...>`` placeholders stay as the unknown
values they are. Outside containers every server has a venv of its own (``/opt/venv-NNN``),
as operators do: ``vllm serve`` runs its console script, ``python -m ...`` stays as typed
with the venv first on ``PATH``. The running version is the first PEP 440 token of the
case's ``vllm_version`` text (what ``/version`` would say).

Servers that crashed in the report are shown running a light load: the audit's value is
predicting the crash from version, flags and GPU. Where a case's ``metrics_note`` gives
numbers (acceptance of 002, 017, 027, 032), the workload reproduces them.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from demo.paths import report_paths
from demo.procnode import ProcNode, ServerPids
from demo.specs import Container, ServerSpec, int_option, option, place_server
from demo.traffic import Workload

_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?"
                         r"(?:\.dev\d+)?(?:\+[0-9a-z.]+)?)", re.IGNORECASE)
_DOCKER_FLAGS = {"-d", "-i", "-t", "-it", "-itd", "-dit", "--rm", "--privileged", "--detach",
                 "--interactive", "--tty", "--init"}
#: A light, healthy background load for case servers (assumed, not from a seed).
CASE_LOAD = Workload(gen_tps=60, prompt_len=800, gen_len=200, ttft_s=0.3, tpot_s=0.03,
                     running=2, kv_usage=0.12, source="light background load (assumed)")
#: Accepted tokens per draft position from each case's metrics_note (casekit.CASE_METRICS).
CASE_ACCEPTANCE = {
    "002": (25 / 913, 0.0, 0.0, 0.0),   # "Accepted 25 vs Drafted 3652 tokens", k=4
    "017": (0.0,),                        # "Accepted 0 tokens, Drafted 40 tokens", k=1
    "027": (0.8, 0.5, 0.3, 0.2),          # acceptance length "declined to ~2.8", k=4
    "032": (0.002,),                      # "near zero (0.2%)", k=1
}
#: Healthy per-position acceptance used for spec-decode cases without a note (assumed).
DEFAULT_ACCEPTANCE = (0.6, 0.4, 0.25, 0.15, 0.1, 0.05)


def case_version(text: str | None) -> str:
    """What ``GET /version`` would say for a case's free-text version string."""
    for match in _VERSION_RE.finditer(text or ""):
        try:
            Version(match[1])
        except InvalidVersion:
            continue
        return match[1]
    return (text or "latest").split()[0].rsplit(":", 1)[-1]


def split_docker(argv: list[str]) -> tuple[str, list[str], dict[str, str], dict[int, int]]:
    """``docker run OPTS IMAGE ARGS`` -> (image, args, ``-e`` env, ``-p`` container->host)."""
    i = argv.index("run") + 1
    env: dict[str, str] = {}
    ports: dict[int, int] = {}
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        if opt in _DOCKER_FLAGS or "=" in opt:
            i += 1
            continue
        value = argv[i + 1]
        if opt in ("-e", "--env"):
            key, _, val = value.partition("=")
            env[key] = val
        if opt in ("-p", "--publish"):
            host, _, cont = value.rpartition(":")
            ports[int(cont)] = int(host.rsplit(":", 1)[-1])
        i += 2
    return argv[i], argv[i + 1:], env, ports


def _entrypoint(version: str, args: list[str]) -> tuple[str, ...]:
    try:
        serve = Version(version) >= Version("0.11.0")
    except InvalidVersion:
        serve = True  # `latest`, `nightly`: current images
    if serve:
        return ("/usr/bin/python3", "/usr/local/bin/vllm", "serve", *args)
    return ("python3", "-m", "vllm.entrypoints.openai.api_server", *args)


def _model(args: list[str]) -> str:
    model = option(args, "--model")
    if model:
        return model
    first = args[0] if args and not args[0].startswith("-") else None
    return first or "unknown"


def _case_load(cid: str) -> Workload:
    """:data:`CASE_LOAD` varied per case (deterministic in the case id): every case host
    showed the same KV sparkline. KV usage 0.06-0.41, 1-4 running requests,
    generation rate in proportion; all assumed, like CASE_LOAD itself."""
    spread = zlib.crc32(cid.encode())
    running = 1 + spread % 4
    return CASE_LOAD.with_changes(kv_usage=round(0.06 + (spread >> 3) % 36 / 100, 2),
                                  running=running, gen_tps=30 * running)


def _workload(cid: str, k: int) -> Workload:
    load = _case_load(cid)
    if cid in CASE_ACCEPTANCE:
        return load.with_changes(per_position=CASE_ACCEPTANCE[cid],
                                 source=f"case {cid} metrics_note")
    if k:
        return load.with_changes(per_position=DEFAULT_ACCEPTANCE[:k])
    return load


@dataclass(frozen=True)
class Case:
    """One case report that runs a server.

    ``cid``: the report's number (``"002"``); ``name``: its file stem; ``server``: the
    server as :class:`ServerSpec` (GPU indices ``0..n-1`` for the report's ``n`` GPUs);
    ``gpus``: the report's ``gpus`` entries as written (``name``, ``count``, ``memory_gib``).
    """

    cid: str
    name: str
    server: ServerSpec
    gpus: tuple[dict[str, Any], ...]


def load_case(path: Path) -> Case | None:
    """The case of one report file, or None for a ``vllm bench`` line (not a server).

    Raises ``KeyError`` for a report without ``argv`` and ``ValueError`` for invalid JSON.
    """
    case = json.loads(path.read_text(encoding="utf-8"))
    cid = path.name.split("-", 1)[0]
    argv = [str(a) for a in case["argv"]]
    if argv[:2] == ["vllm", "bench"]:
        return None
    version = case_version(case.get("vllm_version"))
    env = dict(case.get("env") or {})
    gpus = tuple(case.get("gpus") or [])
    count = sum(int(spec.get("count") or 1) for spec in gpus)
    server = _server(cid, argv, env, version).changed(gpus=tuple(range(count)) or (0,))
    return Case(cid, path.stem, server, gpus)


def load_cases() -> list[Case]:
    """Every case that runs a server, sorted by case id (FileNotFoundError without data)."""
    cases = [load_case(p) for p in report_paths()]
    return [c for c in cases if c is not None]


def place_cases(proc: ProcNode) -> list[tuple[Case, ServerPids]]:
    """Every case's server on one node (:func:`~demo.specs.place_server`), in case order."""
    return [(case, place_server(proc, case.server)) for case in load_cases()]


def _server(cid: str, argv: list[str], env: dict[str, str], version: str) -> ServerSpec:
    container = None
    prefix, site, cwd = f"/opt/venv-{cid}", "lib/python3.12/site-packages", "/home/ml"
    if argv[0] == "docker":
        image, args, denv, ports = split_docker(argv)
        env.update(denv)
        container = Container(image, tuple(ports.items()), name=f"case-{cid}")
        kernel = _entrypoint(version, args)
    elif argv[0].startswith("<") or "vllm-openai" in argv[0]:
        image, args = (None, argv[1:]) if argv[0].startswith("<") else (argv[0], argv[1:])
        container = Container(image, (), name=f"case-{cid}")
        kernel = _entrypoint(version, args)
    elif argv[0] == "vllm":
        args = argv[2:]
        kernel = (f"{prefix}/bin/python3", f"{prefix}/bin/vllm", *argv[1:])
    else:  # `python -m vllm.entrypoints.openai.api_server`: the venv's python, through PATH
        args = argv[argv.index("vllm.entrypoints.openai.api_server") + 1:] \
            if "vllm.entrypoints.openai.api_server" in argv else argv[1:]
        kernel = tuple(argv)
    if container:
        prefix, site, cwd = "/usr/local", "lib/python3.12/dist-packages", "/vllm-workspace"
    env.setdefault("PATH", f"{prefix}/bin:/usr/bin:/bin")
    env.setdefault("HOME", "/root" if container else "/home/ml")
    model = _model(args)
    served = option(args, "--served-model-name", "--served_model_name") or model
    probe = ServerSpec(key="main", argv=tuple(kernel), version=version, model_id=served,
                       root=model, workload=CASE_LOAD)
    tp = int_option(args, "--tensor-parallel-size", "-tp") or 1
    return probe.changed(workload=_workload(cid, probe.spec_k),
                         port=int_option(args, "--port") or 8000,
                         max_model_len=int_option(args, "--max-model-len"), tp=tp,
                         env=tuple(env.items()), cwd=cwd, prefix=prefix, site=site,
                         container=container, api_key=option(args, "--api-key"))
