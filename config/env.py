"""Strict readers for environment variables, used by ``config/settings.py`` only.

Every reader records the name it read in :data:`READ`, so tests can check that
``.env.example`` and ``docker-compose.yml`` set only variables the settings know.
A malformed value raises :class:`django.core.exceptions.ImproperlyConfigured`
naming the variable, so a wrong deployment fails at start, not at first use.

Any variable may instead be given as ``NAME_FILE``: the path of a file holding the value
(Docker and Compose secrets are mounted as files under ``/run/secrets``), read when ``NAME``
itself is unset or empty. A ``NAME_FILE`` that cannot be read is an error naming it.
"""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

#: Names of every environment variable the settings read, in reading order.
READ: list[str] = []


def _raw(name: str) -> str | None:
    if name not in READ:
        READ.append(name)
    value = os.environ.get(name)
    if (value is None or value.strip() == "") and os.environ.get(f"{name}_FILE", "").strip():
        path = os.environ[f"{name}_FILE"].strip()
        try:
            with open(path, encoding="utf-8") as handle:
                value = handle.read()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path}: {exc}") from None
    return None if value is None or value.strip() == "" else value.strip()


def env_str(name: str, default: str | None = None) -> str | None:
    """Return the variable as a stripped string, or ``default`` when unset or empty."""
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    """Return ``true``/``false`` (exactly, case-insensitive) as a bool.

    Raises ImproperlyConfigured for anything else (``1``, ``yes``...), naming ``name``.
    """
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ImproperlyConfigured(f"{name} must be 'true' or 'false', got {value!r}")


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """Return an integer >= ``minimum``; raises ImproperlyConfigured naming ``name``."""
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """Return a comma-separated list (empty items dropped)."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


_RATE = re.compile(r"^(\d+)\s*/\s*(\d*)\s*(s|m|h)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def env_rate(name: str, default: str) -> tuple[int, int]:
    """Parse a rate such as ``1/5s`` (1 event per 5 seconds) or ``10/m``.

    Returns ``(events, period_seconds)``. Raises ImproperlyConfigured naming ``name``.
    """
    value = _raw(name) or default
    match = _RATE.match(value)
    if not match or int(match.group(1)) < 1:
        raise ImproperlyConfigured(
            f"{name} must look like '1/5s', '10/m' or '100/h', got {value!r}")
    events, count, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3)
    if count < 1:
        raise ImproperlyConfigured(f"{name} period must be >= 1, got {value!r}")
    return events, count * _UNIT_S[unit]
