"""Serving the node agent: ``/agent/install.sh``, ``/agent/dist/<wheel>``, and the
admin's "add host" page with the one-line install command.

The install script and the wheel need no login (a node has no session); they carry
no secret. The enrollment secret travels only in the one-liner an admin copies.
The wheel is built once with ``pip wheel`` (``manage.py build_agent_wheel``, run by
``make demo`` and the Dockerfile) into ``var/dist``; a missing wheel is built on
first request so a fresh checkout still serves one.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from fleet.access import permits
from fleet.models import EnrollmentSecret
from fleet_agent import __version__ as AGENT_VERSION
from fleet_agent.installer import one_liner, render_install_script

log = logging.getLogger(__name__)

#: pip builds the wheel from pyproject.toml (agent only); seconds before giving up.
WHEEL_BUILD_TIMEOUT_S = 300
_build_lock = threading.Lock()


def dist_dir() -> Path:
    """Where built agent wheels live (``var/dist``)."""
    return Path(settings.VAR_DIR) / "dist"


def wheel_name() -> str:
    """File name of the current agent wheel (PEP 427), from ``fleet_agent.__version__``."""
    return f"vllm_fleet_agent-{AGENT_VERSION}-py3-none-any.whl"


def build_agent_wheel(force: bool = False) -> Path:
    """Build the agent wheel into :func:`dist_dir` unless present; returns its path.

    Raises ``RuntimeError`` with pip's output when the build fails.
    """
    target = dist_dir() / wheel_name()
    with _build_lock:
        if target.exists() and not force:
            return target
        dist_dir().mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist_dir()),
             str(settings.BASE_DIR)], capture_output=True, text=True,
            timeout=WHEEL_BUILD_TIMEOUT_S)
        if done.returncode != 0 or not target.exists():
            raise RuntimeError(f"agent wheel build failed: {done.stderr[-2000:]}")
    return target


_digests: dict[tuple[str, int, int], str] = {}


def agent_wheel() -> tuple[Path, str]:
    """The served wheel's path and its sha256 (lowercase hex), hashed once per file version.

    The install script embeds the digest and refuses a download that differs. Raises
    ``RuntimeError``/``subprocess.TimeoutExpired`` like :func:`build_agent_wheel`.
    """
    path = build_agent_wheel()
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _digests:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _digests.clear()
        _digests[key] = digest.hexdigest()
    return path, _digests[key]


@require_GET
def install_script(request: HttpRequest) -> HttpResponse:
    """``GET /agent/install.sh``: the POSIX installer with this dashboard's URL and the
    served wheel's name and sha256 filled in (503 while no wheel can be served)."""
    try:
        _, sha256 = agent_wheel()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("%s", exc)
        return HttpResponse("agent package not built; run `manage.py build_agent_wheel`\n",
                            status=503, content_type="text/plain; charset=utf-8")
    text = render_install_script(settings.SITE_URL, wheel_name(), sha256)
    return HttpResponse(text, content_type="text/x-shellscript; charset=utf-8")


@require_GET
def agent_dist(request: HttpRequest, name: str) -> FileResponse:
    """``GET /agent/dist/<wheel>``: the agent wheel (only the current one is served)."""
    if name != wheel_name():
        raise Http404("no such agent package")
    try:
        path = build_agent_wheel()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("%s", exc)
        raise Http404("agent package not built; run `manage.py build_agent_wheel`") from exc
    return FileResponse(path.open("rb"), as_attachment=True, filename=name,
                        content_type="application/octet-stream")


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
    return render(request, "agent/add_host.html", {
        "command": command, "site_url": settings.SITE_URL, "wheel": wheel_name(),
        "generic": one_liner(settings.SITE_URL, "YOUR_ENROLLMENT_SECRET"),
    })
