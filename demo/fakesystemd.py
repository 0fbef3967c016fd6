"""A stand-in for ``systemctl``/``journalctl`` on a simulated node.

The node writes its failed units to ``<node>/systemd.json`` (``{"units": [{"id", "argv",
"failed_since", "restart_every_s", "journal": [...]}]}``) and small wrapper executables named
``systemctl`` and ``journalctl`` in ``<node>/bin`` call :func:`main`; the real agent runs them
through :class:`fleet_agent.failed_starts.Sources` (``path=<node>/bin``), exactly as it runs
the real tools. A failed unit restarts every ``restart_every_s`` seconds (systemd
``Restart=always`` with ``RestartSec``) and exits again: ``NRestarts`` grows with time.
Only the subcommands and flags the agent uses are answered.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any


def _units(state_path: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads(state_path.read_text()).get("units") or [])
    except (OSError, ValueError):
        return []


def restarts(unit: dict[str, Any], now: float) -> tuple[int, float]:
    """``(NRestarts, time of the last exit)`` of ``unit`` at ``now``."""
    every = max(0.5, float(unit.get("restart_every_s") or 10))
    since = float(unit["failed_since"])
    count = 1 + int(max(0.0, now - since) // every)
    return count, since + (count - 1) * every


def _show(unit: dict[str, Any], now: float) -> str:
    count, last = restarts(unit, now)
    argv = shlex.join(unit["argv"])
    return (f"Id={unit['id']}\n"
            f"ExecStart={{ path={unit['argv'][0]} ; argv[]={argv} ; ignore_errors=no ; }}\n"
            "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\n"
            f"NRestarts={count}\nExecMainStatus=1\nExecMainExitTimestamp=@{int(last)}\n")


def main(tool: str, state_path: str, args: list[str]) -> int:
    """Answer one ``systemctl``/``journalctl`` call from ``state_path``; returns the exit code."""
    units = _units(Path(state_path))
    now = time.time()
    if tool == "systemctl" and args[:1] == ["list-units"]:
        for unit in units:
            print(f"{unit['id']} loaded activating auto-restart vLLM (simulated)")
        return 0
    if tool == "systemctl" and args[:1] == ["show"]:
        names = {a for a in args[1:] if not a.startswith("-")}
        print("\n".join(_show(u, now) for u in units if u["id"] in names))
        return 0
    if tool == "journalctl" and "-u" in args:
        name = args[args.index("-u") + 1]
        for unit in units:
            if unit["id"] == name:
                _, last = restarts(unit, now)
                for line in unit.get("journal") or []:
                    print(json.dumps({"MESSAGE": line,
                                      "__REALTIME_TIMESTAMP": str(int(last * 1e6))}))
        return 0
    print(f"{tool}: unsupported arguments {args}", file=sys.stderr)
    return 1


def wrapper(tool: str, state_path: Path, repo: Path) -> str:
    """The executable text of ``<node>/bin/<tool>`` (this interpreter, this checkout)."""
    return (f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(repo)!r})\n"
            "from demo.fakesystemd import main\n"
            f"sys.exit(main({tool!r}, {str(state_path)!r}, sys.argv[1:]))\n")
