"""``fleet-agent`` command line: enroll, collect [--print], run, status, revoke.

The enrollment secret never goes in argv (world-readable in ``/proc``, kept in shell
history): ``--secret-file PATH`` (``-`` reads stdin) or ``$FLEET_ENROLL_SECRET``.

Common options (before or after the subcommand): ``--config PATH`` (default
``/etc/fleet-agent/config.toml``, env ``FLEET_AGENT_CONFIG``), ``--root DIR`` (the
filesystem root holding ``proc/``, ``etc/machine-id`` and the HF cache; default the
config's ``root`` or ``/``), ``--gpu-source nvml|amdsmi|none|FILE.json``
(``nvml`` falls back to AMD SMI where NVML finds no driver). Exit codes: 0 ok,
1 operational failure (enrollment refused), 2 usage or config error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path

from fleet_agent import (
    __version__,
    capabilities,
    config,
    deliver,
    discovery,
    probes,
    procfs,
    runner,
)
from fleet_agent.collect import host_info
from fleet_agent.schema import PROBE_NAMES


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (default $FLEET_AGENT_CONFIG or "
                             f"{config.DEFAULT_CONFIG_PATH})")
    common.add_argument("--root", default=argparse.SUPPRESS,
                        help="filesystem root to read proc/, etc/ and caches from (default /)")
    common.add_argument("--gpu-source", default=argparse.SUPPRESS,
                        help="nvml (default; AMD SMI where NVML finds no driver), amdsmi, "
                             "none, or a recorded reading FILE.json")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and ``--help``)."""
    common = _common()
    parser = argparse.ArgumentParser(prog="fleet-agent", parents=[common],
                                     description="vLLM Fleet Audit node agent")
    parser.add_argument("--version", action="version", version=f"fleet-agent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    enroll = sub.add_parser("enroll", parents=[common], help="exchange a secret for a token")
    enroll.add_argument("--server", required=True, help="dashboard URL, e.g. https://fleet.example")
    enroll.add_argument("--secret-file", metavar="PATH",
                        help="file holding the enrollment secret, '-' for stdin "
                             "(default: $FLEET_ENROLL_SECRET)")
    enroll.add_argument("--interval", type=int, help="collection interval in seconds")
    enroll.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    collect = sub.add_parser("collect", parents=[common], help="collect one report")
    collect.add_argument("--print", action="store_true", dest="print_only",
                         help="print the report as JSON instead of delivering it")
    run = sub.add_parser("run", parents=[common], help="collect and deliver every interval")
    run.add_argument("--cycles", type=int, help=argparse.SUPPRESS)  # tests: stop after N
    run.add_argument("--heartbeat-file", metavar="PATH",
                     default=os.environ.get("FLEET_AGENT_HEARTBEAT_FILE") or None,
                     help="touch PATH after every cycle, for a liveness check "
                          "(env FLEET_AGENT_HEARTBEAT_FILE)")
    probe_cmd = sub.add_parser("probe", parents=[common],
                               help="run the live probes once against the local servers")
    probe_cmd.add_argument("--print", dest="print_only", action="store_true", required=True,
                           help="print the results (nothing is delivered)")
    probe_cmd.add_argument("--server", help="only the server at this URL (e.g. "
                           "http://127.0.0.1:8000); default: every server found")
    probe_cmd.add_argument("--names", nargs="+", choices=PROBE_NAMES, default=list(PROBE_NAMES),
                           help="probes to run (default: all)")
    sub.add_parser("status", parents=[common], help="what was found, spool depth, last delivery")
    sub.add_parser("revoke", parents=[common],
                   help="revoke this host's token on the dashboard (uninstall)")
    return parser


def _load_agent(args: argparse.Namespace) -> tuple[runner.Agent, Path]:
    path = config.config_path(getattr(args, "config", None))
    cfg = config.load(path)
    root = Path(getattr(args, "root", None) or cfg.root)
    gpu_source = getattr(args, "gpu_source", None) or cfg.gpu_source
    return runner.Agent(config=cfg, root=root, gpu_source=gpu_source), path


#: Longest secret read from a file or stdin (the dashboard accepts 128 characters).
MAX_SECRET_CHARS = 128


def _read_secret(args: argparse.Namespace) -> str | None:
    if args.secret_file:
        if args.secret_file == "-":  # noqa: S105 - "-" means stdin, not a password
            text = sys.stdin.read(MAX_SECRET_CHARS + 2)
        else:
            with open(args.secret_file, encoding="utf-8") as fh:
                text = fh.read(MAX_SECRET_CHARS + 2)
        return text.strip() or None
    return os.environ.get("FLEET_ENROLL_SECRET") or None


def cmd_enroll(args: argparse.Namespace) -> int:
    """Enroll with the dashboard and write the token into the config file (0600).

    A token already in the config is sent as ``previous_token`` (a re-install replaces it
    instead of waiting for an admin's approval).
    """
    agent, path = _load_agent(args)
    secret = _read_secret(args)
    if not secret:
        print("enroll: no secret (use --secret-file PATH|- or $FLEET_ENROLL_SECRET)",
              file=sys.stderr)
        return 2
    host = host_info(agent.root, agent.config, {})
    cfg = agent.config
    try:
        answer = deliver.enroll_request(args.server, secret, host["machine_id"],
                                        host["hostname"], previous_token=cfg.token or None)
    except RuntimeError as exc:
        print(f"enroll: {exc}", file=sys.stderr)
        return 1
    cfg.server_url, cfg.token = args.server, answer["token"]
    if args.interval:
        cfg.interval_s = args.interval
    for label in args.label:
        key, _, value = label.partition("=")
        cfg.labels[key] = value
    config.save(cfg, path)
    print(f"enrolled {host['hostname']} ({host['machine_id']}); token written to {path}")
    if answer["pending"]:
        print("this machine was already enrolled: the new token works once an admin approves "
              "it in the dashboard's Settings (Pending enrollments)", file=sys.stderr)
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    """Revoke the configured token on the dashboard and remove it from the config."""
    agent, path = _load_agent(args)
    cfg = agent.config
    if not (cfg.server_url and cfg.token):
        print(f"revoke: {path} holds no token", file=sys.stderr)
        return 0
    try:
        deliver.revoke(cfg.server_url, cfg.token)
    except RuntimeError as exc:
        print(f"revoke: {exc}", file=sys.stderr)
        return 1
    cfg.token = None
    config.save(cfg, path)
    print("token revoked")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    """Print one report (``--print``) or collect it and deliver once."""
    agent, _ = _load_agent(args)
    if args.print_only:
        report = agent.build_report(None)
        print(json.dumps(report.model_dump(mode="json"), indent=1))
        return 0
    stop = threading.Event()
    deliverer = agent.deliverer(stop)
    try:
        print(json.dumps(agent.cycle(deliverer), indent=1))
    finally:
        if deliverer:
            deliverer.close()
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    """Run the probes once and print ``[{"server", "base_url", "probes"}]``."""
    agent, _ = _load_agent(args)
    key = probes.slot_of(args.server, []) if args.server else probes.ALL_SERVERS
    agent.probe_requests = {key: list(args.names)}
    report = agent.build_report(None)
    out = [{"server": probes.slot_of(s.base_url, s.argv), "base_url": s.base_url,
            "probes": [p.model_dump(mode="json") for p in s.probes]}
           for s in report.servers if s.probes]
    print(json.dumps(out, indent=1))
    return 0 if out else 1


def cmd_run(args: argparse.Namespace) -> int:
    """Loop until SIGTERM/SIGINT."""
    agent, path = _load_agent(args)
    if not (agent.config.server_url and agent.config.token):
        print(f"run: {path} has no server_url/token; run `fleet-agent enroll` first "
              "(reports are spooled meanwhile)", file=sys.stderr)
    stop = threading.Event()
    runner.install_signal_handlers(stop)
    heartbeat = Path(args.heartbeat_file) if args.heartbeat_file else None
    return runner.run_forever(agent, stop, max_cycles=args.cycles, heartbeat=heartbeat)


def cmd_status(args: argparse.Namespace) -> int:
    """Print discovered servers (no HTTP), spool depth and the last outcomes."""
    agent, path = _load_agent(args)
    table = procfs.scan(agent.root)
    servers = discovery.find_servers(table)
    for server in servers:
        discovery.inspect(table, server)
    state = agent.state().read()
    spool = agent.spool()
    out = {
        "config": str(path), "server_url": agent.config.server_url,
        "enrolled": bool(agent.config.token),
        "servers_now": [{"pid": s.pid, "base_url": s.base_url, "started_at":
                         s.started_at.isoformat() if s.started_at else None} for s in servers],
        "spool_depth": spool.depth(), "spool_dropped": spool.dropped(),
        "last_collect": state.get("last_collect"), "last_delivery": state.get("last_delivery"),
    }
    print(json.dumps(out, indent=1))
    return 0


COMMANDS = {"enroll": cmd_enroll, "collect": cmd_collect, "run": cmd_run, "status": cmd_status,
            "probe": cmd_probe,
            "revoke": cmd_revoke}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fleet-agent`` console script."""
    args = build_parser().parse_args(argv)
    capabilities.clear_ambient()  # no command the agent starts inherits its capabilities
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    # httpx logs every request at INFO: one line per endpoint per server per cycle is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        return COMMANDS[args.command](args)
    except config.ConfigError as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. spool or config directory not writable for this user
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
