"""Store an agent report raw (:func:`store_report`, in the request) and apply it to the
fleet model later (:func:`derive_report`, in the worker).

Derivation locks the host row (serialises reports of one host, so restart detection
sees a consistent "previous"), then upserts GPUs and servers, writes ChangeEvents
and samples. A report older than the newest one applied is
stored raw but does not roll the host's state back (spool replays arrive late).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.db import DataError, IntegrityError, connection, transaction
from django.utils import timezone

from fleet.lane import steady_key
from fleet.models import ChangeEvent, Gpu, GpuSample, Host, Report, Server, future_cutoff
from fleet.samples import record_sample
from fleet_agent import shellwords
from fleet_agent.schema import FailedStart, ServerInfo
from fleet_agent.schema import Report as WireReport

#: vLLM's default API port when neither base_url nor --port says otherwise.
DEFAULT_VLLM_PORT = 8000
_PORT_FLAG = re.compile(r"^--port(?:=(.*))?$", re.DOTALL)
#: Longest port text read (``65535``); longer digit strings are not ports (and ``int()`` of
#: 5000 digits raises past Python's conversion limit).
_MAX_PORT_DIGITS = 5

log = logging.getLogger(__name__)


#: Server.identity column width.
MAX_IDENTITY_CHARS = 255


def server_identity(info: ServerInfo) -> str:
    """Stable slot name of a server on its host: ``port:8000`` or ``unix:/path``.

    From base_url when given (host part ignored: 0.0.0.0 and 127.0.0.1 are the
    same slot), else from ``--port``/``--uds`` in argv, else the vLLM default port.
    Cut to the column's 255 characters (a socket path is at most 107 bytes on Linux).
    """
    return _slot(info)[:MAX_IDENTITY_CHARS]


def _slot(info: ServerInfo) -> str:
    if info.base_url:
        if info.base_url.startswith("unix:"):
            return info.base_url
        port = url_port(info.base_url)
        if port:
            return f"port:{port}"
    return _identity_from_argv(info.argv)


def url_port(url: str) -> int | None:
    """The port of ``url``, or None when it has none or none that parses (``http://h:abc/``,
    ``http://[::1]:99999999/``, ``http://[zz/``: urllib raises ValueError for each)."""
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def port_number(text: str) -> int | None:
    """``text`` as a TCP port (ASCII digits, 0-65535), else None (``²``, ``٣``, 5000 digits)."""
    if not text or len(text) > _MAX_PORT_DIGITS or not (text.isascii() and text.isdecimal()):
        return None
    port = int(text)
    return port if port <= 65535 else None


def _identity_from_argv(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--uds" and i + 1 < len(argv):
            return f"unix:{argv[i + 1]}"
        if arg.startswith("--uds="):
            return f"unix:{arg.split('=', 1)[1]}"
        match = _PORT_FLAG.match(arg)
        if match:
            value = match.group(1) or (argv[i + 1] if i + 1 < len(argv) else "")
            port = port_number(value)
            if port is not None:
                return f"port:{port}"
    return f"port:{DEFAULT_VLLM_PORT}"


def store_report(host: Host, wire: WireReport, raw: dict[str, Any], key: str | None = None,
                 raw_text: str | None = None) -> tuple[Report | None, bool]:
    """Insert the raw report (the only write ingest does before its 202).

    ``wire`` is the parsed contract report, ``raw`` the JSON as received (kept verbatim,
    unknown fields included). Returns ``(report_row, created)``; ``created`` is False for
    a re-sent ``report_id`` (stored once); ``(None, False)`` when the insert failed and no
    report has that id (the host row is gone: its foreign key). Inside a transaction the
    insert runs in a savepoint so a duplicate hits the unique constraint without breaking
    the caller's transaction; outside (ingest) it is one autocommitted INSERT, committed on
    return. ``key``: :func:`fleet.lane.steady_key` of ``raw`` when the caller has it;
    ``raw_text``: JSON text of ``raw`` (the body as received) to store instead of serialising
    ``raw`` again, on PostgreSQL's ingest path.
    """
    fields = {"host": host, "report_id": wire.report_id, "schema_version": wire.schema_version,
              "raw": raw, "collected_at": wire.collected_at,
              "steady_key": steady_key(raw) if key is None else key}
    try:
        if connection.in_atomic_block:
            with transaction.atomic():
                report = Report.objects.create(**fields)
        elif connection.vendor == "postgresql":  # ingest's hot path
            report = _insert_bound(fields, raw_text)
        else:  # autocommit: one INSERT, one round trip
            report = Report.objects.create(**fields)
    except IntegrityError:
        report = None  # the host's foreign key (a duplicate is no error on PostgreSQL)
    if report is None:
        return Report.objects.filter(report_id=wire.report_id).first(), False
    return report, True


#: Ingest's one statement. A duplicate report_id inserts nothing and returns no
#: row; columns without a database default are given theirs (``Report``'s field defaults).
_INSERT_SQL = (
    "INSERT INTO fleet_report (host_id, report_id, schema_version, raw, received_at, "
    "collected_at, evaluation_error, evaluation_attempts, keep, keep_reason, steady_key) "
    "VALUES (%s, %s, %s, %s::jsonb, %s, %s, '', 0, false, '', %s) "
    "ON CONFLICT (report_id) DO NOTHING RETURNING id")


def _insert_bound(fields: dict[str, Any], raw_text: str | None) -> Report | None:
    """Insert with the parameters bound by the server (a plain psycopg cursor; Django's is
    client-side and quotes the 55 KB body into the SQL text first): the row as a ``Report``,
    or None for a duplicate. Raises Django's ``IntegrityError``/``OperationalError``."""
    import psycopg

    received_at = timezone.now()
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(_INSERT_SQL, (
            fields["host"].pk, fields["report_id"], fields["schema_version"],
            json.dumps(fields["raw"]) if raw_text is None else raw_text, received_at,
            fields["collected_at"],
            fields["steady_key"]))
        row = cursor.fetchone()
    if row is None:
        return None
    return Report(id=row[0], received_at=received_at, **fields)


def record_report(host: Host, wire: WireReport, raw: dict[str, Any]) -> tuple[Report, bool]:
    """Store one report and derive it at once (:func:`store_report` + :func:`apply_report`);
    for callers that need the inventory updated in their own transaction (seeding, tests).
    Must run inside ``transaction.atomic()``."""
    report, created = store_report(host, wire, raw)
    if created:
        locked = Host.objects.select_for_update().get(pk=host.pk)
        apply_report(locked, wire, report)
        report.derived_at = timezone.now()
        report.save(update_fields=["derived_at", "keep", "keep_reason"])
    return report, created


def derive_report(report_id: Any) -> bool:
    """Apply the stored raw report ``report_id`` to its host's servers, GPUs, samples and
    change events, once (worker side of ingest; ``audit.tasks.evaluate_report`` calls it).

    One transaction: the report row is claimed among the rows not yet derived, then the
    host row is locked, so reports of one host are applied one at a time
    and a worker killed half-way leaves nothing (the redelivered task starts again).
    Returns True when this call derived it; False when it is gone or already derived.
    """
    if _already_derived(report_id):
        return False  # the steady lane derived it in the request, or a first delivery did
    with transaction.atomic():
        # Blocking (not SKIP LOCKED): a second delivery waits for the first to commit, then
        # finds the row derived and goes on to the evaluation, which needs it derived.
        report = (Report.objects.select_for_update()
                  .filter(report_id=report_id, derived_at=None).first())
        if report is None:
            return False
        host = Host.objects.select_for_update().get(pk=report.host_id)
        # Ingest ran parse_report's whole check on this body before storing it (and jsonb
        # holds no NaN or NUL); the models alone rebuild it without walking every value
        # again (json_problems was a sixth of a steady report's derivation CPU).
        apply_report(host, WireReport.model_validate(report.raw), report)
        report.derived_at = timezone.now()
        report.save(update_fields=["derived_at", "keep", "keep_reason"])
    return True


def _already_derived(report_id: Any) -> bool:
    """True when the report exists and is derived: one indexed read, no lock and no
    transaction (``derived_at`` is only ever set, so an unlocked "derived" stays true)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT derived_at IS NOT NULL FROM fleet_report WHERE report_id = %s",
                       [str(report_id)])
        row = cursor.fetchone()
    return bool(row and row[0])


def apply_report(host: Host, wire: WireReport, report: Report) -> None:
    """Upsert ``host``'s (locked) state from ``wire``, stored as ``report``.

    A report older than the newest one applied (a late spool replay) is kept raw but does
    not roll the host's state back.
    """
    first_report = host.last_collected_at is None
    cutoff = future_cutoff()
    if host.last_collected_at and host.last_collected_at > cutoff:
        host.last_collected_at = None  # a future time stored before ingest refused them
    if host.last_seen and host.last_seen > cutoff:
        host.last_seen = None
    if host.last_collected_at and wire.collected_at <= host.last_collected_at:
        return  # a late (replayed) report: keep it, leave current state alone
    _update_host(host, wire)
    _record_reported_hostname(host, wire, report)
    _record_gpus(host, wire, report)
    _record_servers(host, wire, report)
    _record_failed_starts(host, wire, report)
    if first_report:
        report.mark_keep("first report")
    if report.keep:
        report.save(update_fields=["keep", "keep_reason"])


def _update_host(host: Host, wire: WireReport) -> None:
    info = wire.host
    host.labels = info.labels or host.labels
    host.last_seen = wire.collected_at if host.last_seen is None else max(
        host.last_seen, wire.collected_at)
    host.last_collected_at = wire.collected_at
    host.agent_version = wire.agent.version
    host.agent_interval_s = wire.agent.interval_s
    host.os = info.os or ""
    host.kernel = info.kernel or ""
    host.nvidia_driver_version = info.nvidia_driver_version or ""
    host.cuda_driver_version = info.cuda_driver_version or ""
    host.gpu_error = wire.gpu_error or ""
    host.save()


def _record_reported_hostname(host: Host, wire: WireReport, report: Report) -> None:
    """A ``REPORTED_HOSTNAME`` event when the report's ``host.hostname`` differs from the
    last one recorded (at first, from the enrolled name): the host's identity stays the
    enrolled ``Host.hostname`` (a token cannot speak for another machine), and what its
    reports call it is kept as history and shown on the host page. One query per report."""
    reported = wire.host.hostname
    previous = host.reported_hostname
    if reported != previous:
        ChangeEvent.objects.create(host=host, report=report,
                                   kind=ChangeEvent.Kind.REPORTED_HOSTNAME,
                                   at=wire.collected_at, old_value=previous, new_value=reported)


#: Gpu columns an incoming reading overwrites (bulk_update in one statement per report).
_GPU_FIELDS = ("index", "name", "memory_total_bytes", "compute_capability", "driver_version",
               "cuda_version", "memory_used_bytes", "utilization_pct", "temperature_c",
               "power_draw_w", "power_limit_w", "is_present", "last_seen",
               "gfx_arch")  # AMD GPUs


def _record_gpus(host: Host, wire: WireReport, report: Report) -> None:
    # One SELECT, one bulk UPDATE, one bulk INSERT of new GPUs and one of samples per report:
    # per-GPU update_or_create cost 5 statements a GPU (bench/ingest.py).
    known = {g.uuid: g for g in host.gpus.all()}
    before = {(g.uuid, g.name) for g in known.values() if g.is_present}
    after = {(g.uuid, g.name) for g in wire.gpus}
    if wire.gpu_error and not wire.gpus:
        return  # GPUs unreadable this cycle: not a change of hardware
    fresh, gpus = [], []
    for info in wire.gpus:
        gpu = known.get(info.uuid)
        if gpu is None:
            gpu = Gpu(host=host, uuid=info.uuid)
            fresh.append(gpu)
        _apply_gpu_reading(gpu, info, wire)
        gpus.append((gpu, info))
    # Linear in the GPU count: membership tests below use sets, never lists
    # (`g not in fresh` on a list made 20,000 GPUs cost a minute).
    existing = [g for g, _ in gpus if g.pk is not None]
    Gpu.objects.bulk_create(fresh)
    if existing:
        _update_gpus(existing)
    GpuSample.objects.bulk_create([
        GpuSample(gpu=gpu, ts=wire.collected_at, memory_used_bytes=info.memory_used_bytes,
                  utilization_pct=info.utilization_gpu_pct, temperature_c=info.temperature_c,
                  power_draw_w=info.power_draw_w) for gpu, info in gpus])
    reported = {info.uuid for info in wire.gpus}
    gone = [g.pk for uuid, g in known.items() if g.is_present and uuid not in reported]
    if gone:
        Gpu.objects.filter(pk__in=gone).update(is_present=False)
    if before and before != after:
        ChangeEvent.objects.create(
            host=host, report=report, kind=ChangeEvent.Kind.GPUS_CHANGED, at=wire.collected_at,
            old_value=", ".join(sorted(n for _, n in before)),
            new_value=", ".join(sorted(n for _, n in after)))
        report.mark_keep("GPUs changed")


def _update_gpus(gpus: list[Gpu]) -> None:
    """Write :data:`_GPU_FIELDS` of known GPUs: one prepared UPDATE per GPU, sent as one
    batch (``executemany``). Django's ``bulk_update`` builds a CASE expression per column and
    row, which cost more CPU than all the rest of a steady report's derivation
    (bench/evaluation_throughput.py --profile)."""
    fields = [Gpu._meta.get_field(name) for name in _GPU_FIELDS]
    # Table and column names come from the model, never from input.
    sql = (f"UPDATE {Gpu._meta.db_table} SET "  # noqa: S608
           + ", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in fields)
           + " WHERE id = %s")
    rows = [[f.get_db_prep_save(getattr(gpu, f.attname), connection) for f in fields]
            + [gpu.pk] for gpu in gpus]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def _apply_gpu_reading(gpu: Gpu, info: Any, wire: WireReport) -> None:
    gpu.index, gpu.name = info.index, info.name
    gpu.memory_total_bytes = info.memory_total_bytes
    gpu.compute_capability = info.compute_capability or ""
    gpu.gfx_arch = info.gfx_arch or ""
    gpu.driver_version = wire.host.nvidia_driver_version or wire.host.amd_driver_version or ""
    gpu.cuda_version = wire.host.cuda_driver_version or ""
    gpu.memory_used_bytes = info.memory_used_bytes
    gpu.utilization_pct, gpu.temperature_c = info.utilization_gpu_pct, info.temperature_c
    gpu.power_draw_w, gpu.power_limit_w = info.power_draw_w, info.power_limit_w
    gpu.is_present, gpu.last_seen = True, wire.collected_at


def _record_servers(host: Host, wire: WireReport, report: Report) -> None:
    seen: list[int] = []
    identities: set[str] = set()
    # Lowest pid first: if two processes share a slot (e.g. --api-server-count > 1
    # reported per process), the same one wins every cycle, so no false restarts.
    for info in sorted(wire.servers, key=lambda s: s.pid):
        identity = server_identity(info)
        if identity in identities:
            continue
        identities.add(identity)
        try:
            with transaction.atomic():  # a savepoint: one bad server must not sink the report
                server = _record_server(host, info, wire, report)
        except (ValueError, DataError) as exc:
            log.warning("host %s: server pid %s not recorded: %s", host.pk, info.pid, exc)
            continue
        seen.append(server.pk)
    gone = list(host.servers.filter(is_running=True).exclude(pk__in=seen))
    for server in gone:
        _event(server, report, ChangeEvent.Kind.SERVER_STOPPED, wire, str(server.pid), "")
    if gone:  # a steady report stops nothing: no UPDATE statement for it
        Server.objects.filter(pk__in=[s.pk for s in gone]).update(is_running=False)


def failed_start_identity(entry: FailedStart) -> str:
    """The slot a failed start belongs to: ``--port``/``--uds`` of its argv (vLLM's default
    port when neither is given), as for a running server without a base_url. Cut to the
    column's 255 characters (a ``--uds`` path may be longer)."""
    return _identity_from_argv(entry.argv)[:MAX_IDENTITY_CHARS]


#: A report may add slots for failed starts only while the host has fewer servers than this:
#: a hostile agent inventing a new port every cycle must not grow the table without bound.
MAX_SLOTS_PER_HOST = 64
#: Observations of a failed start kept per slot (one per report; a day of 30 s reports is
#: more than any crash-loop window needs).
MAX_FAILED_START_OBSERVATIONS = 120


def _record_failed_starts(host: Host, wire: WireReport, report: Report) -> None:
    """Put each failed start on its slot (``Server.failed_start``); a slot with no Server yet
    (a new unit that never came up) gets one, not running. A slot running in this report
    is not down: its failed start is stale (the unit restarted and came up)."""
    running = {server_identity(info) for info in wire.servers}
    at = wire.collected_at.isoformat()
    for entry in wire.failed_starts:
        identity = failed_start_identity(entry)
        if identity in running:
            continue
        try:
            with transaction.atomic():  # a savepoint, as for servers
                _record_failed_start(host, wire, report, entry, identity, at)
        except (ValueError, DataError) as exc:
            log.warning("host %s: failed start %s not recorded: %s", host.pk,
                        entry.unit_or_container, exc)
    Server.objects.filter(host=host, identity__in=running,
                          failed_start__isnull=False).update(failed_start=None)


def _record_failed_start(host: Host, wire: WireReport, report: Report, entry: FailedStart,
                         identity: str, at: str) -> None:
    server = Server.objects.filter(host=host, identity=identity).first()
    if server is None:
        if host.servers.count() >= MAX_SLOTS_PER_HOST:
            return
        server = Server.objects.create(
            host=host, identity=identity, pid=0, argv=entry.argv, is_running=False,
            first_seen=wire.collected_at, last_seen=wire.collected_at,
            container_image=entry.image or "")
    previous = server.failed_start or {}
    observations = list(previous.get("observations") or [])
    cumulative = entry.restart_count
    if entry.source == "process" or cumulative is None:
        # a vanished process reports no counter: every report that sees it dead is one exit
        cumulative = (observations[-1][1] + 1) if observations else 1
    observations.append([at, cumulative])
    if entry.vllm_version and not server.installed_vllm_version:
        server.installed_vllm_version = entry.vllm_version  # a host's first report
    server.failed_start = {
        "entry": entry.model_dump(mode="json"), "report_id": str(report.report_id),
        "first_seen": previous.get("first_seen") or at, "last_seen": at,
        "observations": observations[-MAX_FAILED_START_OBSERVATIONS:]}
    server.save(update_fields=["failed_start", "installed_vllm_version"])
    report.mark_keep("failed start")


def _record_server(host: Host, info: ServerInfo, wire: WireReport, report: Report) -> Server:
    identity = server_identity(info)
    server = Server.objects.filter(host=host, identity=identity).first()
    if server is None:
        server = Server(host=host, identity=identity, pid=info.pid, first_seen=wire.collected_at)
        _apply_server_fields(server, info)
        server.save()
        _event(server, report, ChangeEvent.Kind.SERVER_STARTED, wire, "", server.vllm_version)
        report.mark_keep("new server")
        same_process = False
    else:
        same_process = _detect_changes(server, info, wire, report)
        _apply_server_fields(server, info)
    server.is_running = True
    server.last_seen = wire.collected_at
    server.last_report = report
    if info.metrics is not None:
        block = {"text": info.metrics.text, "compact": info.metrics.compact.model_dump()
                 if info.metrics.compact is not None else None}
        record_sample(server, report, block, info.metrics.scraped_at, same_process)
    server.save()
    return server


def _detect_changes(server: Server, info: ServerInfo, wire: WireReport, report: Report) -> bool:
    """Write events for what changed since the previous report; True if same process."""
    same_process = server.pid == info.pid and server.started_at == info.started_at
    if not same_process:
        server.restart_count += 1
        _event(server, report, ChangeEvent.Kind.RESTART, wire, _proc(server.pid, server.started_at),
               _proc(info.pid, info.started_at))
    new_version = info.vllm_version or ""
    if new_version and server.vllm_version and new_version != server.vllm_version:
        server.previous_vllm_version = server.vllm_version
        _event(server, report, ChangeEvent.Kind.VERSION_CHANGED, wire, server.vllm_version,
               new_version)
        report.mark_keep("version changed")
    installed = info.installed_vllm_version or ""
    if installed and server.installed_vllm_version and installed != server.installed_vllm_version:
        _event(server, report, ChangeEvent.Kind.INSTALLED_VERSION_CHANGED, wire,
               server.installed_vllm_version, installed)
        report.mark_keep("installed version changed")
    if info.argv != server.argv:
        _event(server, report, ChangeEvent.Kind.CONFIG_CHANGED, wire, _argv(server.argv),
               _argv(info.argv))
        report.mark_keep("flags changed")
    if info.env != server.env:
        report.mark_keep("env changed")  # no event (redacted values), but the raw stays
    models = [m.id for m in info.models]
    if models and models != server.model_ids:
        report.mark_keep("models changed")
    new_sha = info.chat_template.sha256 if info.chat_template else ""
    if new_sha and server.chat_template_sha256 and new_sha != server.chat_template_sha256:
        _event(server, report, ChangeEvent.Kind.TEMPLATE_CHANGED, wire,
               server.chat_template_sha256, new_sha)
        report.mark_keep("template changed")
    return same_process


def _apply_server_fields(server: Server, info: ServerInfo) -> None:
    server.base_url = info.base_url or server.base_url
    server.pid, server.started_at = info.pid, info.started_at
    server.argv, server.env = info.argv, info.env
    server.container_image = info.container_image or ""
    server.kubernetes = info.kubernetes.model_dump(mode="json") if info.kubernetes else None
    # An unreachable /version (null) keeps the last known running version.
    server.vllm_version = info.vllm_version or server.vllm_version
    server.installed_vllm_version = info.installed_vllm_version or server.installed_vllm_version
    server.model_ids = [m.id for m in info.models] or server.model_ids
    lens = [m.max_model_len for m in info.models if m.max_model_len]
    server.max_model_len = lens[0] if lens else server.max_model_len
    server.gpu_uuids = info.gpu_uuids
    server.errors = info.errors
    if info.chat_template is not None:
        server.chat_template_source = info.chat_template.source or ""
        server.chat_template_sha256 = info.chat_template.sha256
        server.chat_template_size = info.chat_template.size_bytes


def _event(server: Server, report: Report, kind: str, wire: WireReport, old: str,
           new: str) -> ChangeEvent:
    return ChangeEvent.objects.create(host=server.host, server=server, report=report, kind=kind,
                                      at=wire.collected_at, old_value=old, new_value=new)


def _proc(pid: int, started_at: Any) -> str:
    when = started_at.strftime("%Y-%m-%d %H:%M:%S UTC") if started_at else "unknown"
    return f"pid {pid} started {when}"


def _argv(argv: list[str]) -> str:
    """A command line as shown in the change history: quoted like every shown command
    (:func:`fleet_agent.shellwords.join`: no control character reaches a viewer's terminal)."""
    return shellwords.join(argv)
