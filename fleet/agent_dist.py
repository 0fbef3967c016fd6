"""Serving the node agent: ``/agent/install.sh``, ``/agent/dist/<wheel>``, the pinned
dependency lock ``/agent/dist/<lock>``, and the admin's "add host" page with the one-line
install command.

The install script and the wheel need no login (a node has no session); they carry
no secret. The enrollment secret travels only in the one-liner an admin copies.
The wheel is built ahead of time by ``manage.py build_agent_wheel`` (``make agent-wheel``,
run by ``make demo`` and by the Dockerfile) into ``var/dist``. A request never builds it: a
missing wheel answers 503 saying which command builds it. The build copies the agent alone
(``fleet_agent/``, ``pyproject.toml``, ``README.md``) into a temporary folder and runs
``pip wheel`` there, so setuptools never walks the checkout (``var/sim/<host>/root/proc`` holds
symlinks to ``/`` and ``/proc``); on a timeout the whole build process group is killed.
The build also copies ``fleet_agent/requirements.lock`` (``make agent-lock``: every dependency
pinned with its wheels' sha256) next to the wheel, so the lock served is the one the wheel was
built with; the install script embeds both digests and installs the lock with
``pip install --require-hashes``, then the wheel with ``--no-deps``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path

from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods
from packaging.version import InvalidVersion, Version

from fleet.access import permits
from fleet.models import EnrollmentSecret
from fleet_agent import __version__ as AGENT_VERSION
from fleet_agent.installer import one_liner, render_install_script

log = logging.getLogger(__name__)

#: pip builds the wheel from pyproject.toml (agent only); seconds before giving up.
WHEEL_BUILD_TIMEOUT_S = 300
_build_lock = threading.Lock()
#: pyproject.toml's ``[build-system] requires`` (PEP 639 ``license`` strings need 77).
SETUPTOOLS_MIN = Version("77")


def dist_dir() -> Path:
    """Where built agent wheels live (``var/dist``)."""
    return Path(settings.VAR_DIR) / "dist"


def wheel_name() -> str:
    """File name of the current agent wheel (PEP 427), from ``fleet_agent.__version__``."""
    return f"vllm_fleet_agent-{AGENT_VERSION}-py3-none-any.whl"


def lock_name() -> str:
    """File name of the served dependency lock (``requirements.lock`` of this agent version)."""
    return f"vllm_fleet_agent-{AGENT_VERSION}-requirements.lock"


#: What the agent distribution is built from (paths relative to the checkout).
AGENT_SOURCES = ("fleet_agent", "pyproject.toml", "README.md")
#: The agent's dependencies pinned with hashes (``make agent-lock``), relative to the checkout.
LOCK_SOURCE = Path("fleet_agent") / "requirements.lock"


def build_agent_wheel(force: bool = False, out_dir: Path | None = None) -> Path:
    """Build the agent wheel into ``out_dir`` (default :func:`dist_dir`) unless present, and
    copy the dependency lock (:data:`LOCK_SOURCE`) there as :func:`lock_name` (every time).

    Returns the wheel's path. Raises ``FileNotFoundError`` when the checkout has no lock, and
    ``RuntimeError`` with pip's output when the build fails or exceeds
    :data:`WHEEL_BUILD_TIMEOUT_S` (the build's process group is killed first).
    """
    out = Path(out_dir) if out_dir is not None else dist_dir()
    target = out / wheel_name()
    with _build_lock:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(settings.BASE_DIR) / LOCK_SOURCE, out / lock_name())
        if target.exists() and not force:
            return target
        with tempfile.TemporaryDirectory(prefix="agent-wheel-") as tmp:
            source = _stage_agent_sources(Path(tmp) / "src")
            _run_pip_wheel(source, out)
        if not target.exists():
            raise RuntimeError(f"agent wheel build wrote no {target.name} in {out}")
    return target


def _stage_agent_sources(dest: Path) -> Path:
    """Copy the agent package and its build metadata (nothing else) into ``dest``."""
    base = Path(settings.BASE_DIR)
    dest.mkdir(parents=True)
    for name in AGENT_SOURCES:
        src = base / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _run_pip_wheel(source: Path, out: Path) -> None:
    """``pip wheel --no-deps`` of ``source`` into ``out`` in its own process group.

    Without build isolation when this interpreter has the setuptools ``pyproject.toml`` asks
    for (no download, seconds); on a timeout the group (pip and its build backend) is
    killed, so no child outlives it.
    """
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)]
    if _has_build_backend():
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=WHEEL_BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"agent wheel build exceeded {WHEEL_BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"agent wheel build failed: {stderr[-2000:]}")


def _has_build_backend() -> bool:
    """Whether setuptools >= 77 (``[build-system] requires`` of pyproject.toml) is installed."""
    try:
        return Version(metadata.version("setuptools")) >= SETUPTOOLS_MIN
    except (metadata.PackageNotFoundError, InvalidVersion):
        return False


_digests: dict[tuple[str, int, int], str] = {}


def agent_wheel() -> tuple[Path, str]:
    """The served wheel's path and its sha256 (lowercase hex), hashed once per file version.

    The install script embeds the digest and refuses a download that differs. Never builds
    (that is ``manage.py build_agent_wheel``'s job, never a request's): raises
    ``RuntimeError`` while the wheel is not built.
    """
    return _served_file(wheel_name())


def agent_lock() -> tuple[Path, str]:
    """The served dependency lock's path and sha256, like :func:`agent_wheel` (``RuntimeError``
    while ``manage.py build_agent_wheel`` has not copied it next to the wheel)."""
    return _served_file(lock_name())


def _served_file(name: str) -> tuple[Path, str]:
    """``dist_dir() / name`` and its sha256, hashed once per (path, mtime, size)."""
    path = dist_dir() / name
    if not path.is_file():
        raise RuntimeError(f"agent file {path} missing; run `manage.py build_agent_wheel`")
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _digests:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        for stale in [k for k in _digests if k[0] == key[0]]:
            del _digests[stale]
        _digests[key] = digest.hexdigest()
    return path, _digests[key]


@require_GET
def install_script(request: HttpRequest) -> HttpResponse:
    """``GET /agent/install.sh``: the POSIX installer with this dashboard's URL and the
    served wheel's and dependency lock's names and sha256 filled in (503 while either is
    missing)."""
    try:
        _, sha256 = agent_wheel()
        _, lock_sha256 = agent_lock()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("%s", exc)
        return HttpResponse("agent package not built; run `manage.py build_agent_wheel`\n",
                            status=503, content_type="text/plain; charset=utf-8")
    text = render_install_script(settings.SITE_URL, wheel_name(), sha256,
                                 lock_name=lock_name(), lock_sha256=lock_sha256)
    return HttpResponse(text, content_type="text/x-shellscript; charset=utf-8")


@require_GET
def agent_dist(request: HttpRequest, name: str) -> HttpResponse:
    """``GET /agent/dist/<name>``: the prebuilt agent wheel or its dependency lock (only the
    current ones are served).

    404 for any other name; 503 (plain text, how to build it) while the file is not built.
    """
    if name == lock_name():
        content_type = "text/plain; charset=utf-8"
    elif name == wheel_name():
        content_type = "application/octet-stream"
    else:
        raise Http404("no such agent package")
    path = dist_dir() / name
    if not path.is_file():
        log.error("agent file %s missing; run `python manage.py build_agent_wheel`", path)
        return HttpResponse(
            f"The agent package {name} is not built on this dashboard. An admin builds it "
            "with `python manage.py build_agent_wheel` (or `make agent-wheel`); the Docker "
            "image builds it at image build.\n", status=503,
            content_type="text/plain; charset=utf-8", headers={"Retry-After": "300"})
    return FileResponse(path.open("rb"), as_attachment=True, filename=name,
                        content_type=content_type)


@require_http_methods(["GET", "POST"])
@never_cache  # the page shows a one-time secret: no browser or proxy keeps a copy
@permits("manage_secrets")
def add_host(request: HttpRequest) -> HttpResponse:
    """Admin page: create an enrollment secret and show the one-line install command once."""
    command = None
    if request.method == "POST":
        name = (request.POST.get("name") or "added from the dashboard").strip()[:100]
        _, secret = EnrollmentSecret.create(name)
        command = one_liner(settings.SITE_URL, secret)
    return render(request, "fleet/add_host.html", {
        "command": command, "site_url": settings.SITE_URL, "wheel": wheel_name(),
        "generic": one_liner(settings.SITE_URL, "YOUR_ENROLLMENT_SECRET"),
    })
