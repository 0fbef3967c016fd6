"""One collection cycle: host, GPUs, vLLM servers -> a contract :class:`Report`.

Order of work: scan ``<root>/proc``, inspect each API server (env, cwd, port, container),
read GPUs (NVML or a recorded reading) and map GPU processes to servers, query each
server over HTTP, read its installed vLLM version and chat template, then redact
secrets (argv, env, URLs, error texts) and scrub every secret value seen from every
string of the report before it is serialised. Nothing here raises for a node problem:
what cannot be read is None/absent with the reason in ``errors``/``gpu_error``.
"""

from __future__ import annotations

import ipaddress
import logging
import platform
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from fleet_agent import (
    __version__,
    discovery,
    failed_starts,
    gpus,
    metrics_compact,
    modelfiles,
    ondisk,
    probe,
    probes,
    procfs,
    redact,
    trim,
)
from fleet_agent.config import AgentConfig, ServerOverride
from fleet_agent.report_redaction import redact_report
from fleet_agent.schema import (
    MAX_REPORT_BYTES,
    SUPPORTED_SCHEMA_VERSIONS,
    FailedStart,
    GpuInfo,
    Report,
    ServerInfo,
)

log = logging.getLogger("fleet_agent.collect")

#: The newest wire-contract version this agent speaks (the schema owns the list).
SCHEMA_VERSION = SUPPORTED_SCHEMA_VERSIONS[-1]
#: Headroom under the 4 MiB limit: pydantic's JSON differs slightly from the dict measured.
TRIM_MARGIN_BYTES = 64 * 1024
#: Servers probed at once; a node rarely runs more than 8 vLLM servers.
MAX_PROBE_THREADS = 8
#: Seconds the servers of one cycle may take in all. One server is bounded by its scrape
#: deadline (``probe.SCRAPE_DEADLINE_S``, 15 s) plus its live probes' budget
#: (``probes.PROBES_BUDGET_S``, 30 s); a server still unfinished at the budget (more slow
#: servers than threads) is reported with its process facts and an error line, so the
#: host's report always goes out.
CYCLE_BUDGET_S = 60.0


@dataclass
class CycleInput:
    """What a cycle needs: config, filesystem root, GPU source and spool counters."""

    config: AgentConfig
    root: Path = Path("/")
    gpu_source: str = "nvml"
    spool_dropped: int = 0
    spool_depth: int | None = None
    probe_http: bool = True
    #: Failed-start sources (systemd, Docker/Podman sockets); None reads none of them.
    failed_start_sources: failed_starts.Sources | None = None
    #: Servers of the previous cycle, for "a vLLM process died since"; None skips that.
    process_memory: failed_starts.ProcessMemory | None = None
    #: Live probes an operator asked for, ``{server identity: [names]}``; a server
    #: not named here is never sent a probe request.
    probe_requests: dict[str, list[str]] = field(default_factory=dict)
    #: Last probe results per server identity, re-sent with every report of that server
    #: (the dashboard re-arms them after an upgrade or a template change).
    probe_memory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Seconds the servers' collection may take in all (:data:`CYCLE_BUDGET_S`).
    budget_s: float = CYCLE_BUDGET_S
    #: When the raw /metrics text goes with its compact form (kept across cycles by the
    #: agent); None sends the text every cycle (one-shot runs, ``fleet-agent report``).
    text_policy: metrics_compact.TextPolicy | None = None


@dataclass
class _ServerWork:
    proc: discovery.ServerProcess | None
    override: ServerOverride | None
    data: dict[str, Any] = field(default_factory=dict)


def _read_text(path: Path) -> str | None:
    data = procfs.read_bytes(path, 64 << 10)
    return data.decode("utf-8", "replace").strip() if data is not None else None


def host_info(root: Path, config: AgentConfig, reading: dict[str, Any]) -> dict[str, Any]:
    """Host fields of the contract; ``machine_id`` falls back to ``hostname`` when unreadable."""
    hostname = _read_text(root / "proc/sys/kernel/hostname") or _read_text(root / "etc/hostname")
    if not hostname and root == Path("/"):
        hostname = socket.gethostname()
    hostname = hostname or "unknown"
    machine_id = _read_text(root / "etc/machine-id") \
        or _read_text(root / "var/lib/dbus/machine-id") or f"hostname:{hostname}"
    return {
        "hostname": hostname[:255], "machine_id": machine_id[:255],
        "os": _os_release(root),
        "kernel": _read_text(root / "proc/sys/kernel/osrelease")
        or (platform.release() if root == Path("/") else None),
        "nvidia_driver_version": reading.get("driver_version"),
        "cuda_driver_version": reading.get("cuda_driver_version"),
        "amd_driver_version": reading.get("amd_driver_version"),
        "labels": dict(config.labels),
    }


def _os_release(root: Path) -> str | None:
    text = _read_text(root / "etc/os-release") or _read_text(root / "usr/lib/os-release")
    for line in (text or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"') or None
    return None


def collect(inp: CycleInput) -> Report:
    """Run one cycle and return the validated, redacted report (may be trimmed to fit)."""
    found: set[str] = set()
    table = procfs.scan(inp.root)
    servers = discovery.find_servers(table)
    for server in servers:
        discovery.inspect(table, server)
    reading = gpus.read_source(inp.gpu_source)
    owners = gpus.owners(reading.get("processes") or [], table.ancestors,
                         {s.pid for s in servers})
    work = _match_overrides(servers, inp.config.servers)
    # Servers are probed in parallel so that one loading server (5 s read timeout) does not
    # delay the others; each thread fills only its own item.
    found_per_item: list[set[str]] = [set() for _ in work]
    entries = _entries_within_budget(inp, work, owners, found_per_item)
    for item, data, extra in zip(work, entries, found_per_item, strict=True):
        item.data = data
        found |= extra
    if inp.process_memory is not None:
        for server in servers:
            inp.process_memory.track(inp.root, server.pid, server.argv)
        for item in work:
            data = item.data or {}
            if data.get("pid"):
                inp.process_memory.note(data["pid"], data.get("installed_vllm_version"),
                                        bool(data.get("models")))
    failed, failed_notes = failed_starts.collect_failed_starts(
        inp.failed_start_sources, inp.process_memory, servers, found, inp.root)
    data = {
        "schema_version": SCHEMA_VERSION,
        "report_id": str(uuid.uuid4()),
        "collected_at": datetime.now(timezone.utc).isoformat(),
        "agent": {"version": __version__, "interval_s": inp.config.interval_s,
                  "spool_dropped": inp.spool_dropped, "spool_depth": inp.spool_depth},
        "host": host_info(inp.root, inp.config, reading),
        "gpus": reading.get("gpus") or [],
        "gpu_error": reading.get("error"),
        "gpu_processes": reading.get("processes") or [],
        "servers": [item.data for item in work],
        "failed_starts": failed,
        "failed_start_errors": failed_notes,
    }
    # The same whole-document pass as ingest's (model files, labels, probe evidence, any
    # field a collector forgot), then every secret value met anywhere scrubbed everywhere.
    data = trim.conform(redact.scrub(redact_report(data), found | _config_secrets(inp.config)))
    _sanitize(data)
    return Report.model_validate(trim.fit(data, MAX_REPORT_BYTES - TRIM_MARGIN_BYTES))


def _sanitize(data: dict[str, Any]) -> None:
    """Make every GPU/server entry valid so one odd value never costs the whole report.

    An invalid GPU is dropped (reason appended to ``gpu_error``); an invalid server field
    is reset to its default (reason appended to that server's ``errors``).
    """
    kept = []
    for gpu in data["gpus"]:
        try:
            kept.append(GpuInfo.model_validate(gpu).model_dump(mode="json"))
        except ValidationError as exc:
            note = f"GPU {gpu.get('index')} dropped: {exc.errors()[0]['msg']}"
            data["gpu_error"] = f"{data['gpu_error']}; {note}" if data["gpu_error"] else note
    data["gpus"] = kept
    data["gpu_processes"] = [p for p in data["gpu_processes"] if isinstance(p.get("pid"), int)
                             and p["pid"] > 0 and p.get("gpu_uuid")]
    kept_failed = []
    for entry in data["failed_starts"]:
        try:
            kept_failed.append(FailedStart.model_validate(entry).model_dump(mode="json"))
        except ValidationError as exc:
            data["failed_start_errors"].append(
                f"failed start {str(entry.get('unit_or_container'))[:100]} dropped: "
                f"{exc.errors()[0]['msg']}")
    data["failed_starts"] = kept_failed
    data["failed_start_errors"] = [e[:1000] for e in data["failed_start_errors"]][:20]
    kept_servers = []
    for server in data["servers"]:
        for _ in range(len(ServerInfo.model_fields)):
            try:
                ServerInfo.model_validate(server)
                kept_servers.append(server)
                break
            except ValidationError as exc:
                if not _reset_fields(server, exc):
                    log.warning("server pid %s not reported: %s", server.get("pid"),
                                exc.errors()[0]["msg"])
                    break
    data["servers"] = kept_servers


def _reset_fields(server: dict[str, Any], exc: ValidationError) -> bool:
    """Reset each invalid optional field to its default (noted in ``errors``); False when a
    required one (pid, argv) is invalid: the server is dropped, not the whole report."""
    for err in exc.errors():
        name = str(err["loc"][0])
        field = ServerInfo.model_fields.get(name)
        if field is None or field.is_required():
            return False
        server[name] = field.get_default(call_default_factory=True)
        server.setdefault("errors", []).append(f"{name} dropped: {err['msg']}"[:2000])
    return True


def _config_secrets(config: AgentConfig) -> set[str]:
    values = {s.api_key for s in config.servers if s.api_key}
    return values | ({config.token} if config.token else set())


def _match_overrides(servers: list[discovery.ServerProcess],
                     overrides: list[ServerOverride]) -> list[_ServerWork]:
    work = [_ServerWork(proc=s, override=None) for s in servers]
    for override in overrides:
        if override.is_remote:
            work.append(_ServerWork(proc=None, override=override))
            continue
        for item in work:
            if item.proc and item.override is None and override.matches(item.proc.pid,
                                                                        item.proc.port):
                item.override = override
                break
    return work


def _server_entry(inp: CycleInput, item: _ServerWork, owners: dict[int, list[str]],
                  found: set[str]) -> dict[str, Any]:
    proc, override = item.proc, item.override
    entry = _process_fields(inp.root, proc, owners, found) if proc \
        else _remote_fields(override, found)
    if override and override.base_url:
        entry["base_url"] = override.base_url
    if override and override.container_image:
        entry["container_image"] = override.container_image
    connect = entry.get("base_url") if override and override.base_url \
        else (proc.connect_url if proc else None)
    api_key = _configured_key(override, connect, entry["errors"]) \
        or (_own_api_key(proc) if proc else None)
    if override and override.api_key:
        found.add(override.api_key)
    if api_key:
        found.add(api_key)
    if inp.probe_http and connect:
        _apply_probe(entry, probe.probe(connect, api_key), inp.text_policy)
        _run_probes(inp, entry, connect, api_key, found)
    entry["base_url"] = redact.redact_urls(entry["base_url"], found) \
        if entry.get("base_url") else None
    entry["errors"] = [redact.redact_text(e, found) for e in entry["errors"]]
    return entry


def _run_probes(inp: CycleInput, entry: dict[str, Any], connect: str, api_key: str | None,
                found: set[str]) -> None:
    """Run the probes asked for this server, stamp each result with the version
    and template it was measured on, and attach the last results (kept in
    ``inp.probe_memory``) to the entry; a server with no request is sent nothing."""
    slot = probes.slot_of(entry.get("base_url"), entry["argv"])
    names = inp.probe_requests.get(slot) or inp.probe_requests.get(probes.ALL_SERVERS)
    if names:
        model = entry["models"][0]["id"] if entry.get("models") else None
        stamp = {"vllm_version": entry.get("vllm_version"),
                 "template_sha256": (entry.get("chat_template") or {}).get("sha256")}
        fresh = {r["name"]: {**r, **stamp, "evidence": redact.redact_text(r["evidence"], found)}
                 for r in probes.run_probes(connect, model, names, api_key,
                                            argv=entry["argv"])}
        kept = {r["name"]: r for r in inp.probe_memory.get(slot, [])}
        inp.probe_memory[slot] = list({**kept, **fresh}.values())
    if inp.probe_memory.get(slot):
        entry["probes"] = inp.probe_memory[slot]


def _entries_within_budget(inp: CycleInput, work: list[_ServerWork],
                           owners: dict[int, list[str]],
                           found_per_item: list[set[str]]) -> list[dict[str, Any]]:
    """One entry per server, collected in parallel within ``inp.budget_s`` seconds; a server
    not done by then gets :func:`_fallback_entry` (its thread is left to end on its own
    deadlines, its late result unused)."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(MAX_PROBE_THREADS, len(work))))
    futures = [pool.submit(_safe_entry, inp, item, owners, found_per_item[i])
               for i, item in enumerate(work)]
    wait(futures, timeout=inp.budget_s)
    pool.shutdown(wait=False, cancel_futures=True)
    entries = []
    for i, (item, future) in enumerate(zip(work, futures, strict=True)):
        if future.done() and not future.cancelled():
            entries.append(future.result())
            continue
        found_per_item[i] = set()  # the late thread may still add to the old set
        log.warning("server collection past the cycle budget (%.0f s)", inp.budget_s)
        entries.append(_fallback_entry(item, found_per_item[i], f"collection did not finish "
                                       f"within the cycle's {inp.budget_s:g} s budget"))
    return entries


def _fallback_entry(item: _ServerWork, found: set[str], error: str) -> dict[str, Any]:
    """A server's entry from its process facts alone (pid, redacted argv) and ``error``."""
    argv = item.proc.argv if item.proc else (item.override.argv if item.override else None)
    return {"pid": item.proc.pid if item.proc else (item.override.pid if item.override else 1),
            "argv": redact.redact_argv(argv or ["?"], found) or ["?"], "errors": [error]}


def _safe_entry(inp: CycleInput, item: _ServerWork, owners: dict[int, list[str]],
                found: set[str]) -> dict[str, Any]:
    """:func:`_server_entry`, but an unexpected failure costs one server's details only."""
    try:
        return _server_entry(inp, item, owners, found)
    except Exception as exc:  # a bug or odd node data must not drop the whole report
        log.exception("collecting a server failed")
        return _fallback_entry(item, found, f"collection failed: {type(exc).__name__}: {exc}")


def _configured_key(override: ServerOverride | None, connect: str | None,
                    errors: list[str]) -> str | None:
    """The agent config's ``api_key`` for this server, if it may go to ``connect``.

    Only to the configured ``base_url`` or to a loopback/unix-socket endpoint: a server
    matched by pid or port names its own ``--host``, and a local user's fake server could
    name any host to collect the key.
    """
    if not override or not override.api_key or not connect:
        return None
    if override.base_url and connect == override.base_url:
        return override.api_key
    if is_local_endpoint(connect):
        return override.api_key
    errors.append("configured api_key not sent: the server's address is neither loopback "
                  "nor the configured base_url (set base_url for this server)")
    return None


def is_local_endpoint(url: str) -> bool:
    """True for ``unix:`` sockets and http(s) URLs whose host is a loopback address or
    ``localhost``."""
    if url.startswith("unix:"):
        return True
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _own_api_key(proc: discovery.ServerProcess) -> str | None:
    """The server's own key (``--api-key`` or env ``VLLM_API_KEY``): used locally, never sent."""
    key = discovery.option_value(proc.options(), "--api-key")
    return key or (proc.env or {}).get("VLLM_API_KEY") or None


def _process_fields(root: Path, proc: discovery.ServerProcess, owners: dict[int, list[str]],
                    found: set[str]) -> dict[str, Any]:
    errors = list(proc.errors)
    template, template_error = ondisk.chat_template(root, proc)
    if template_error:
        errors.append(f"chat template: {template_error}")
    installed = ondisk.installed_vllm_version(root, proc)
    if installed is None:
        errors.append("installed vllm version: no vllm dist-info next to the interpreter")
    return {
        "pid": proc.pid,
        "started_at": proc.started_at.isoformat() if proc.started_at else None,
        "argv": redact.redact_argv(proc.argv, found) or ["?"],
        "env": redact.redact_env(proc.env or {}, found),
        "container_image": proc.container_image,
        "base_url": proc.base_url,
        "gpu_uuids": owners.get(proc.pid, []),
        "installed_vllm_version": installed,
        "chat_template": vars(template) if template else None,
        "cwd": proc.cwd,
        "kubernetes": proc.kubernetes,
        "port": proc.port,
        "listen_ports": sorted(proc.listen_ports or []),
        "model_revision": ondisk.model_revision(root, proc),
        "model_files": modelfiles.model_files(root, proc),
        "discovered": True,
        "errors": errors,
    }


def _remote_fields(override: ServerOverride | None, found: set[str]) -> dict[str, Any]:
    assert override is not None and override.argv  # guaranteed by config validation
    return {"pid": override.pid, "argv": redact.redact_argv(override.argv, found),
            "base_url": override.base_url, "discovered": False,
            "errors": ["declared in the agent config: no process, env, template or installed "
                       "version could be read"]}


def _apply_probe(entry: dict[str, Any], result: probe.ProbeResult,
                 policy: metrics_compact.TextPolicy | None = None) -> None:
    entry["vllm_version"] = result.version
    entry["models"] = result.models
    if result.metrics_text is not None and result.scraped_at is not None:
        # The compact form is what the dashboard derives from; the text rides along only
        # when the policy says so ("" keeps older dashboards, which require the key, happy).
        compact = metrics_compact.compact(result.metrics_text)
        slot = probes.slot_of(entry.get("base_url"), entry["argv"])
        send = policy is None or policy.send_text(slot, compact["names_sha256"])
        entry["metrics"] = {"format": "prometheus-text",
                            "scraped_at": result.scraped_at.isoformat(),
                            "text": result.metrics_text if send else "",
                            "compact": compact}
    entry["errors"].extend(result.errors)
