"""Keep the agent's capabilities out of the commands it runs.

The systemd unit (``fleet_agent/install.sh``) grants ``CAP_SYS_PTRACE`` and
``CAP_DAC_READ_SEARCH`` as AMBIENT capabilities, and ambient capabilities pass through
``execve`` to every child: ``journalctl`` and ``systemctl`` then read every journal and
unit file whatever their group. The agent needs neither capability in its children, so
:func:`clear_ambient` empties the calling thread's ambient set before each command (and once
at start, so threads created later inherit an empty set). The agent's own permitted and
effective sets are untouched: what it read before it still reads.

Linux only (``prctl(2)``: ``PR_CAP_AMBIENT`` = 47, ``PR_CAP_AMBIENT_CLEAR_ALL`` = 4, since
Linux 4.3; constants from ``<linux/prctl.h>``); elsewhere, or on an older kernel, a no-op.
Capabilities are per thread, which is why the command's own thread calls it: the child is
forked from that thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


@functools.lru_cache(maxsize=1)
def _prctl() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def clear_ambient() -> bool:
    """Empty the calling thread's ambient capability set; True when the kernel did it (or
    there was nothing to clear), False where ambient capabilities do not exist."""
    prctl = _prctl()
    if prctl is None:
        return False
    return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0
