"""The one-line installer the dashboard serves at ``GET /agent/install.sh``.

The dashboard calls :func:`render_install_script` with its own URL, the wheel it serves
at ``/agent/dist/<wheel>`` and the dependency lock next to it; the values are checked so
that nothing an admin typed can inject shell code into a script that runs as root.
"""

from __future__ import annotations

import re
from importlib import resources

_SITE_URL = re.compile(r"^https?://[A-Za-z0-9.\-]+(:\d{1,5})?(/[A-Za-z0-9._~\-/]*)?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCK = re.compile(r"^[A-Za-z0-9_.\-]+\.lock$")
_WHEEL = re.compile(r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.+!]+(-[A-Za-z0-9_.]+){2,3}\.whl$")


def install_script_template() -> str:
    """The raw ``install.sh`` shipped as package data (placeholders unfilled)."""
    return resources.files("fleet_agent").joinpath("install.sh").read_text(encoding="utf-8")


def render_install_script(site_url: str, wheel_name: str,
                          wheel_sha256: str | None = None, *, lock_name: str | None = None,
                          lock_sha256: str | None = None) -> str:
    """``install.sh`` with ``__SITE_URL__``, ``__AGENT_WHEEL__``, ``__AGENT_WHEEL_SHA256__``,
    ``__AGENT_LOCK__`` and ``__AGENT_LOCK_SHA256__`` filled.

    ``site_url``: ``http(s)://host[:port][/path]`` without quotes, spaces or query;
    ``wheel_name``: a PEP 427 file name; ``wheel_sha256``: the served wheel's sha256 in
    lowercase hex; ``lock_name``: the served dependency lock's file name (``*.lock``),
    ``lock_sha256`` its sha256. Without a digest or the lock's name the script refuses to
    install. Raises ``ValueError`` naming the bad value.
    """
    site_url = site_url.rstrip("/")
    if not _SITE_URL.match(site_url):
        raise ValueError(f"site URL not usable in the install script: {site_url!r}")
    if not _WHEEL.match(wheel_name):
        raise ValueError(f"not a wheel file name: {wheel_name!r}")
    if lock_name is not None and not _LOCK.match(lock_name):
        raise ValueError(f"not a lock file name: {lock_name!r}")
    for digest in (wheel_sha256, lock_sha256):
        if digest is not None and not _SHA256.match(digest):
            raise ValueError(f"not a sha256 hex digest: {digest!r}")
    text = install_script_template()
    for placeholder, value in (("__AGENT_WHEEL_SHA256__", wheel_sha256),
                               ("__AGENT_LOCK_SHA256__", lock_sha256),
                               ("__AGENT_LOCK__", lock_name)):
        if value is not None:
            text = text.replace(placeholder, value)
    return text.replace("__SITE_URL__", site_url).replace("__AGENT_WHEEL__", wheel_name)


def one_liner(site_url: str, secret: str) -> str:
    """The command the "add host" page shows.

    The secret goes into a 0600 file through ``printf`` (a shell builtin, so never in any
    process's argv) and the installer reads it from there (``FLEET_ENROLL_SECRET_FILE``);
    the file is removed afterwards. Raises ``ValueError`` for a secret that is not URL-safe.
    """
    if not re.fullmatch(r"[A-Za-z0-9_\-.~]+", secret):
        raise ValueError("enrollment secret must be URL-safe characters only")
    return (f"(umask 077 && printf '%s\\n' '{secret}' > fleet-enroll.secret) && "
            f"curl -fsSL {site_url.rstrip('/')}/agent/install.sh | "
            f'sudo FLEET_ENROLL_SECRET_FILE="$PWD/fleet-enroll.secret" sh; '
            f"rm -f fleet-enroll.secret")
