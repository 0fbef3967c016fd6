"""The agent's capabilities stay with the agent: its ``journalctl``/``systemctl`` children
start with an empty ambient set.

The systemd unit grants CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH as ambient capabilities,
which ``execve`` passes on: journalctl then read every journal whatever its group. A helper
process gets CAP_DAC_READ_SEARCH in its ambient set (as the unit gives it; root, or root of
a fresh user namespace where the test runs unprivileged), checks that a plain child
inherits it (the check is real), then runs a child through the agent's command runner
(``fleet_agent.failed_starts._run``) and reads the child's own ``/proc/self/status``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HELPER = textwrap.dedent('''
    import ctypes, json, subprocess
    from fleet_agent import failed_starts
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    CAP_DAC_READ_SEARCH, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 2, 47, 2
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)      # _LINUX_CAPABILITY_VERSION_3, self
    data = (ctypes.c_uint32 * 6)()                     # 2 x {effective, permitted, inheritable}
    assert libc.capget(header, data) == 0, ctypes.get_errno()
    data[2] |= 1 << CAP_DAC_READ_SEARCH                # inheritable: needed to raise ambient
    assert libc.capset(header, data) == 0, ctypes.get_errno()
    assert libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0) == 0
    def amb(text):
        return next(int(l.split()[1], 16) for l in text.splitlines() if l.startswith("CapAmb:"))
    plain = amb(subprocess.run(["cat", "/proc/self/status"], capture_output=True,
                               text=True).stdout)
    src = failed_starts.Sources(path="/usr/bin:/bin")
    via_agent = amb(failed_starts._run(["cat", "/proc/self/status"], src))
    print(json.dumps({"plain": plain, "via_agent": via_agent}))
''')


def test_a_command_the_agent_runs_has_no_ambient_capability() -> None:
    argv = [sys.executable, "-c", HELPER]
    if os.geteuid() != 0:
        unshare = shutil.which("unshare")
        assert unshare, "unshare (util-linux) is needed to raise an ambient capability"
        argv = [unshare, "--user", "--map-root-user", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["plain"] == 1 << 2  # a plain child inherits CAP_DAC_READ_SEARCH ...
    assert seen["via_agent"] == 0   # ... the agent's journalctl/systemctl do not
