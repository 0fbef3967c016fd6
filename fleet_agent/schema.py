"""The agent report wire contract (``docs/wire-contract.md``) as pydantic models.

One :class:`Report` per host per collection cycle. The dashboard validates every
POSTed body with :func:`parse_report`; the agent builds its reports with the same
models, so a field renamed on one side breaks the tests of the other.

Extension policy: fields may be added (all optional, defaulting to ``None`` or an
empty list), never renamed or dropped. Unknown fields are accepted and kept
(``extra="allow"``) so an older dashboard stores what a newer agent sends.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

#: Every ``schema_version`` this code accepts. Unknown versions are refused (400).
SUPPORTED_SCHEMA_VERSIONS: tuple[int, ...] = (1,)

#: Replacement for secret values (``--api-key``, ``HF_TOKEN`` ...). The flag stays.
REDACTED = "REDACTED"

#: Largest accepted report after gzip decompression, in bytes (contract: 4 MiB).
MAX_REPORT_BYTES = 4 * 1024 * 1024

# --- limits ----------------------------------------------------
# Integers end in PostgreSQL columns (integer, bigint, smallint: PostgreSQL manual, "Numeric
# Types"); string lengths match the dashboard's columns (fleet/models.py); counts bound the
# work one report can cause. The agent cuts its data to the same limits (fleet_agent/trim.py).
PG_INTEGER_MAX = 2**31 - 1
PG_BIGINT_MAX = 2**63 - 1
PG_SMALLINT_MAX = 2**15 - 1
#: Deepest nesting of objects/arrays anywhere in a report (ours are 5 deep).
MAX_JSON_DEPTH = 32
MAX_SERVERS = 128
MAX_GPUS = 256
MAX_GPU_PROCESSES = 4096
MAX_MODELS = 256
MAX_LABELS = 64
MAX_LABEL_KEY_CHARS = 64
MAX_LABEL_VALUE_CHARS = 256
#: argv words; a word may be an inline chat template or JSON config, hence 64 KiB.
MAX_ARGV = 1024
MAX_ARG_CHARS = 64 * 1024
MAX_ENV = 1024
MAX_ENV_NAME_CHARS = 256
MAX_ENV_VALUE_CHARS = 32 * 1024
MAX_ERRORS = 64
MAX_ERROR_CHARS = 2000
MAX_PORTS = 64
#: /metrics text per server (characters) and per exposition line; real vLLM bodies are a few
#: hundred KiB with lines under 2 KiB.
MAX_METRICS_CHARS = 3 * 1024 * 1024
MAX_METRICS_LINE_CHARS = 64 * 1024
MAX_PATH_CHARS = 4096
#: Marker names per chat template (today's vocabulary has 26; room for newer agents).
MAX_TEMPLATE_MARKERS = 128


def _text(max_chars: int) -> Any:
    """A string type of at most ``max_chars`` characters."""
    return Annotated[str, StringConstraints(max_length=max_chars)]


def json_problems(data: Any, max_depth: int = MAX_JSON_DEPTH) -> list[dict[str, str]]:
    """Values no report may hold, as ``{"path", "message"}``: nesting deeper than
    ``max_depth``, NaN/Infinity, NUL characters and lone surrogates (PostgreSQL's jsonb and
    UTF-8 cannot store them), in strings and object keys. Iterative (no recursion limit);
    stops at the first 20 problems. A document :func:`_plainly_clean` passes has none, so
    only one that fails it (hostile, or a false alarm) is walked value by value."""
    if _plainly_clean(data, max_depth):
        return []
    problems: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack and len(problems) < 20:
        value, loc = stack.pop()
        if isinstance(value, dict | list) and len(loc) >= max_depth:
            problems.append({"path": error_path(loc),
                             "message": f"nested deeper than {max_depth} levels"})
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _bad_text(key):
                    problems.append({"path": error_path((*loc, key)),
                                     "message": f"key {_bad_text(key)}"})
                stack.append((item, (*loc, key)))
        elif isinstance(value, list):
            stack.extend((item, (*loc, i)) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append({"path": error_path(loc), "message": "NaN/Infinity is not a number"})
        elif isinstance(value, str) and _bad_text(value):
            problems.append({"path": error_path(loc), "message": _bad_text(value)})
    return problems


#: Deletes what JSON text holds outside its strings (numbers, literals, separators) but the
#: brackets; anything left that is not a bracket keeps the skeleton from peeling to nothing.
_KEEP_BRACKETS = {c: None for c in range(128) if chr(c) not in "[]{}"}
#: An innermost (empty) container once the rest is removed.
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False)


def _plainly_clean(data: Any, max_depth: int) -> bool:
    """True when :func:`json_problems` would find nothing, judged on ``json.dumps``' text
    (C speed) instead of a Python walk: ``allow_nan=False`` refuses NaN/Infinity, a NUL is
    written as ``\\u0000``, a lone surrogate fails the UTF-8 encode, and peeling the empty
    containers off the bracket skeleton ``max_depth`` times leaves nothing only when no
    container sits deeper. False whenever unsure (a value ``json`` cannot write, a tuple
    the walk would not enter, a literal ``\\u0000``): the walk then gives the answer."""
    try:
        text = _ENCODER.encode(data)
    except (TypeError, ValueError, RecursionError):
        return False
    if "\\u0000" in text:
        return False
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return shallow_text(text, max_depth)


def shallow_text(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``text`` nests no container deeper than ``max_depth``, judged on
    its bracket skeleton: peeling the empty containers off ``max_depth`` times leaves nothing
    only when no container sits deeper. Strings are skipped whatever they hold (escaped
    quotes and backslashes included). ``text`` must be valid JSON."""
    if "\\" in text:  # escapes pair from the left: drop \\ pairs, then escaped quotes
        text = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(text.split('"')[::2])  # no quote left inside a string
    skeleton = outside.translate(_KEEP_BRACKETS)
    for _ in range(max_depth):
        if not skeleton:
            return True
        skeleton = _EMPTY_PAIR.sub("", skeleton)
    return not skeleton


def _bad_text(text: str) -> str:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not UTF-8)"
    return ""


def _to_utc(value: datetime) -> datetime:
    """RFC 3339 timestamps are stored in UTC. A timestamp without an offset is read as UTC;
    any offset is converted (PostgreSQL refuses offsets beyond +-15:59, which pydantic and
    RFC 3339 syntax allow). Raises ValueError when the instant falls outside years 1-9999."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError as exc:
        raise ValueError("timestamp out of range once converted to UTC") from exc


#: A timestamp normalised to UTC (see :func:`_to_utc`).
UtcDatetime = Annotated[datetime, AfterValidator(_to_utc)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)


class AgentInfo(_Model):
    """Who sent the report. ``interval_s`` is the agent's collection interval in seconds."""

    version: str = Field(max_length=64)
    interval_s: int = Field(ge=1, le=86400)
    spool_dropped: int = Field(default=0, ge=0, le=PG_INTEGER_MAX)
    spool_depth: int | None = Field(default=None, ge=0, le=PG_INTEGER_MAX)


class HostInfo(_Model):
    """The node. ``machine_id`` is its stable identity (``/etc/machine-id``)."""

    hostname: str = Field(min_length=1, max_length=255)
    machine_id: str = Field(min_length=1, max_length=255)
    os: str | None = Field(default=None, max_length=255)
    kernel: str | None = Field(default=None, max_length=255)
    nvidia_driver_version: str | None = Field(default=None, max_length=64)
    cuda_driver_version: str | None = Field(default=None, max_length=64)
    #: amdgpu kernel driver version as AMD SMI reports it (AMD nodes only).
    amd_driver_version: str | None = Field(default=None, max_length=64)
    labels: dict[_text(MAX_LABEL_KEY_CHARS), _text(MAX_LABEL_VALUE_CHARS)] = Field(
        default_factory=dict, max_length=MAX_LABELS)


class GpuInfo(_Model):
    """One GPU as NVML (or AMD SMI) reports it. Memory in bytes, power in watts,
    temperature in °C."""

    index: int = Field(ge=0, le=PG_SMALLINT_MAX)
    uuid: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=255)
    memory_total_bytes: int | None = Field(default=None, ge=0, le=PG_BIGINT_MAX)
    memory_used_bytes: int | None = Field(default=None, ge=0, le=PG_BIGINT_MAX)
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$", max_length=16)
    #: AMD GPUs: the LLVM target in place of a compute capability, as AMD SMI's
    #: ``target_graphics_version`` gives it (``gfx942``; feature suffixes such as
    #: ``:sramecc+:xnack-`` allowed). None on NVIDIA.
    gfx_arch: str | None = Field(default=None, max_length=64,
                                 pattern=r"^gfx[0-9a-f]{2,6}(:[A-Za-z0-9+-]{1,16}){0,4}$")
    vendor: Literal["nvidia", "amd"] | None = None  # None from older agents
    utilization_gpu_pct: float | None = Field(default=None, ge=0, le=100)
    temperature_c: float | None = None
    power_draw_w: float | None = Field(default=None, ge=0)
    power_limit_w: float | None = Field(default=None, ge=0)
    ecc_errors_uncorrected: int | None = Field(default=None, ge=0, le=PG_BIGINT_MAX)
    xid_errors: list[Annotated[int, Field(ge=0, le=PG_INTEGER_MAX)]] = Field(
        default_factory=list, max_length=MAX_ERRORS)


class ModelCard(_Model):
    """One entry of the server's ``GET /v1/models``; ``max_model_len`` in tokens."""

    id: str = Field(min_length=1, max_length=512)
    root: str | None = Field(default=None, max_length=512)
    max_model_len: int | None = Field(default=None, ge=1, le=PG_INTEGER_MAX)


class ChatTemplate(_Model):
    """The chat template the server uses: where it came from, its sha256 and size in bytes.

    ``markers``: names of the tool-call markup and reasoning tags found in the template's
    text (vocabulary: ``fleet_agent/template_markers.py``, docs/wire-contract.md); None from
    an agent that does not extract them, ``[]`` when the template has none. Names outside
    today's vocabulary are accepted (a newer agent) and ignored by the checks.
    """

    source: str | None = Field(default=None, max_length=1000)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0, le=PG_INTEGER_MAX)
    revision: str | None = Field(default=None, max_length=255)
    markers: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]] | None = \
        Field(default=None, max_length=MAX_TEMPLATE_MARKERS)

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


# ------------------------------------------------------------------ compact /metrics form
# The families the dashboard reads, as numbers (fleet_agent/metrics_compact.py has the shape
# and the bounds); optional: a report with only ``text`` is what older agents send.

_Labels = Annotated[dict[_text(MAX_LABEL_KEY_CHARS), _text(MAX_LABEL_VALUE_CHARS)],
                    Field(max_length=MAX_LABELS)]
MAX_COMPACT_FAMILIES = 128


class CompactHistogram(_Model):
    """One histogram series: bucket bounds as exposed (``"+Inf"`` included) and the
    cumulative counts in the same order; ``sum``/``count`` None when not exposed."""

    labels: _Labels = Field(default_factory=dict)
    le: list[_text(32)] = Field(default_factory=list, max_length=256)
    counts: list[float] = Field(default_factory=list, max_length=256)
    sum: float | None = None
    count: float | None = None

    @field_validator("counts")
    @classmethod
    def _same_length(cls, value: list[float], info: Any) -> list[float]:
        if len(value) != len(info.data.get("le") or []):
            raise ValueError("counts and le differ in length")
        return value


class MetricsCompact(_Model):
    """``samples``: sample name -> ``[[labels, value], ...]``; ``histograms``: family ->
    series; ``names_sha256``: digest of every sample name of the body; ``vllm_names``: how
    many distinct ``vllm:`` names the body had; ``vllm_engine_label``: whether one of them
    carried an ``engine`` label."""

    samples: dict[_text(256), Annotated[list[tuple[_Labels, float]], Field(max_length=512)]] = \
        Field(default_factory=dict, max_length=MAX_COMPACT_FAMILIES)
    histograms: dict[_text(256), Annotated[list[CompactHistogram], Field(max_length=512)]] = \
        Field(default_factory=dict, max_length=MAX_COMPACT_FAMILIES)
    names_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    vllm_names: int = Field(default=0, ge=0, le=PG_INTEGER_MAX)
    vllm_engine_label: bool = False


class MetricsScrape(_Model):
    """The ``/metrics`` body exactly as vLLM served it (renames are handled server-side),
    and/or its compact form. ``text`` is "" when the agent sent the compact form alone."""

    format: Literal["prometheus-text"] = "prometheus-text"
    scraped_at: UtcDatetime
    text: str = Field(default="", max_length=MAX_METRICS_CHARS)
    compact: MetricsCompact | None = None

    @field_validator("text")
    @classmethod
    def _line_length(cls, value: str) -> str:
        longest = max_line_length(value)
        if longest > MAX_METRICS_LINE_CHARS:
            raise ValueError(f"a line of {longest} characters; at most "
                             f"{MAX_METRICS_LINE_CHARS} per line")
        return value


class ModelFiles(_Model):
    """What the node read from the served model's directory; every field optional.

    ``source``: ``hf-cache:<org>/<name>@<40-hex commit>`` or the local directory as the
    process sees it. ``config``: the parsed ``config.json`` (at most 256 KiB on disk; text
    sub-configs such as ``text_config`` whole, other sub-configs reduced to their scalars,
    lists capped at 1024 items). ``generation_config``: ``generation_config.json``.
    ``quantization_config``: ``config.json``'s ``quantization_config``, else
    ``hf_quant_config.json``/``quantize_config.json``; ``hf_quant_config``: that side file
    as read. ``weights_bytes``: bytes of the weights (safetensors index
    ``metadata.total_size``, else the sum of ``*.safetensors`` sizes). ``weights_dtype``:
    the quantisation method when quantised (``fp8``, ``awq``, ``mxfp4``...), else
    ``torch_dtype``. ``speculator``: the same for a local draft model of
    ``--speculative-config``. ``errors``: what could not be read and why. Files are read
    only when the vLLM process's own uid could read them (``fleet_agent/modelfiles.py``).
    """

    source: str | None = Field(default=None, max_length=1024)
    config: dict[str, Any] | None = None
    generation_config: dict[str, Any] | None = None
    quantization_config: dict[str, Any] | None = None
    hf_quant_config: dict[str, Any] | None = None
    weights_bytes: int | None = Field(default=None, ge=0)
    weights_dtype: str | None = Field(default=None, max_length=64)
    speculator: ModelFiles | None = None
    errors: list[str] = Field(default_factory=list)


class KubernetesPod(_Model):
    """The Kubernetes pod a server runs in, read on the node from the process's
    cgroup path, the container runtime's record and its environment (no API access).
    Names follow Kubernetes' syntax: namespace and container are DNS-1123 labels (63),
    the pod name a DNS-1123 subdomain (253); ``pod_uid`` the pod's UID. Unknown parts null."""

    namespace: str | None = Field(default=None, max_length=63,
                                  pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    pod: str | None = Field(default=None, max_length=253,
                            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    container: str | None = Field(default=None, max_length=63,
                                  pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    pod_uid: UUID | None = None


#: Live probes: names the agent knows, and bounds of one result.
PROBE_NAMES: tuple[str, ...] = ("stream_control_tokens", "forced_tool_choice",
                                "tool_continuation_cot", "draft_acceptance", "template_identity")
MAX_PROBES = 16
MAX_PROBE_EVIDENCE_CHARS = 2000


class ProbeOutcome(_Model):
    """One live probe's result on this server (run only when an operator asked).

    ``outcome``: ``confirmed`` (the known issue shows on this server), ``not_reproduced``,
    ``error`` (the probe could not run to a verdict) or ``skipped`` (not applicable, e.g. no
    speculative decoding). ``evidence``: a trimmed, redacted excerpt; ``duration_ms`` in ms.
    """

    name: str = Field(min_length=1, max_length=64)
    ran_at: UtcDatetime
    outcome: Literal["confirmed", "not_reproduced", "error", "skipped"]
    evidence: str = Field(default="", max_length=MAX_PROBE_EVIDENCE_CHARS)
    duration_ms: int = Field(default=0, ge=0, le=PG_INTEGER_MAX)
    #: What the result was measured on: a later version or template re-arms the advisory.
    vllm_version: str | None = Field(default=None, max_length=128)
    template_sha256: str | None = Field(default=None, max_length=64)


class ServerInfo(_Model):
    """One vLLM API-server process (not its EngineCore/worker children)."""

    pid: int = Field(ge=1, le=PG_INTEGER_MAX)
    started_at: UtcDatetime | None = None
    argv: list[_text(MAX_ARG_CHARS)] = Field(min_length=1, max_length=MAX_ARGV)
    env: dict[_text(MAX_ENV_NAME_CHARS), _text(MAX_ENV_VALUE_CHARS)] = Field(
        default_factory=dict, max_length=MAX_ENV)
    container_image: str | None = Field(default=None, max_length=500)
    base_url: str | None = Field(default=None, max_length=500)
    gpu_uuids: list[_text(128)] = Field(default_factory=list, max_length=MAX_GPUS)
    vllm_version: str | None = Field(default=None, max_length=128)
    installed_vllm_version: str | None = Field(default=None, max_length=128)
    models: list[ModelCard] = Field(default_factory=list, max_length=MAX_MODELS)
    chat_template: ChatTemplate | None = None
    metrics: MetricsScrape | None = None
    errors: list[_text(MAX_ERROR_CHARS)] = Field(default_factory=list, max_length=MAX_ERRORS)
    # Added by the agent; all optional.
    cwd: str | None = Field(default=None, max_length=MAX_PATH_CHARS)
    port: int | None = Field(default=None, ge=0, le=65535)
    listen_ports: list[Annotated[int, Field(ge=0, le=65535)]] = Field(
        default_factory=list, max_length=MAX_PORTS)
    model_revision: str | None = Field(default=None, max_length=255)
    discovered: bool | None = None  # False: declared in the agent config, not seen in /proc
    model_files: ModelFiles | None = None  # the model's config/weights from disk
    kubernetes: KubernetesPod | None = None  # the pod the process runs in

    probes: list[ProbeOutcome] = Field(default_factory=list,  # live probes
                                       max_length=MAX_PROBES)

    @field_validator("base_url")
    @classmethod
    def _base_url_shape(cls, value: str | None) -> str | None:
        """``unix:/path`` or an ``http(s)://`` URL whose host and port parse (0-65535)."""
        if value is None or value.startswith("unix:"):
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for ``:abc`` or ``:99999999``
        except ValueError as exc:
            raise ValueError(f"not a URL with a valid port: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected unix:/path or an http(s)://host[:port] URL")
        return value


class GpuProcess(_Model):
    """A process holding a GPU (NVML compute processes); pid in the host pid namespace."""

    gpu_uuid: str = Field(min_length=1, max_length=128)
    pid: int = Field(ge=1, le=PG_INTEGER_MAX)
    used_memory_bytes: int | None = Field(default=None, ge=0, le=PG_BIGINT_MAX)


# ----------------------------------------------------------------------------- failed starts
# Report-level, not per server: a server that fails to start
# has no process (no pid) to hang a ServerInfo on. The dashboard puts each entry on the slot its
# argv names (``--port``/``--uds``, as ``fleet.recording.server_identity`` does).

#: Bounds of one failed start (the agent keeps less: fleet_agent/failed_starts.py).
FAILED_START_MAX_LINES = 100
FAILED_START_MAX_LINE_CHARS = 1000
FAILED_STARTS_MAX = 64


class FailedStart(_Model):
    """A vLLM server that exited during start-up (systemd unit, container, or a process
    that vanished since the last cycle). ``argv`` and ``lines`` are redacted; ``lines`` are
    error lines only (never request logs). ``last_exit_at`` is when it last exited."""

    source: Literal["systemd", "docker", "podman", "process"]
    unit_or_container: str = Field(min_length=1, max_length=255)
    argv: list[Annotated[str, Field(max_length=8192)]] = Field(default_factory=list,
                                                                 max_length=512)
    image: str | None = Field(default=None, max_length=500)
    restart_count: int | None = Field(default=None, ge=0, le=PG_INTEGER_MAX)
    exit_code: int | None = Field(default=None, ge=-PG_INTEGER_MAX, le=PG_INTEGER_MAX)
    last_exit_at: UtcDatetime | None = None
    state: str | None = Field(default=None, max_length=64)
    lines: list[Annotated[str, Field(max_length=FAILED_START_MAX_LINE_CHARS)]] = Field(
        default_factory=list, max_length=FAILED_START_MAX_LINES)
    errors: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list,
                                                                  max_length=20)
    #: The installed vLLM (optional; agents before it send none): the interpreter's
    #: site-packages for a process or unit, the image's version label or tag for a container.
    vllm_version: str | None = Field(default=None, max_length=128)


class Report(_Model):
    """One host's report for one collection cycle (schema_version 1)."""

    schema_version: int
    report_id: UUID
    collected_at: UtcDatetime
    agent: AgentInfo
    host: HostInfo
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=MAX_GPUS)
    gpu_error: str | None = Field(default=None, max_length=MAX_ERROR_CHARS)
    servers: list[ServerInfo] = Field(default_factory=list, max_length=MAX_SERVERS)
    gpu_processes: list[GpuProcess] = Field(default_factory=list,
                                            max_length=MAX_GPU_PROCESSES)

    failed_starts: list[FailedStart] = Field(default_factory=list,
                                             max_length=FAILED_STARTS_MAX)
    failed_start_errors: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=20)  # failed-start sources that could not be read

    @field_validator("gpus")
    @classmethod
    def _unique_gpus(cls, value: list[GpuInfo]) -> list[GpuInfo]:
        if len({g.uuid for g in value}) != len(value):
            raise ValueError("two GPUs share a uuid")
        return value

    @field_validator("schema_version")
    @classmethod
    def _supported(cls, value: int) -> int:
        if value not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(f"unsupported schema_version {value}; supported: "
                             f"{list(SUPPORTED_SCHEMA_VERSIONS)}")
        return value


class ReportError(ValueError):
    """A report body that is not a valid contract report.

    ``details`` is a list of ``{"path": "servers[0].pid", "message": ...}``,
    one per bad field, in the order pydantic found them.
    """

    def __init__(self, message: str, details: list[dict[str, str]]):
        super().__init__(message)
        self.details = details


def error_path(loc: tuple[Any, ...]) -> str:
    """Render a pydantic ``loc`` tuple as a JSON path.

    ``("servers", 0, "pid")`` -> ``servers[0].pid``.
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "$"


def max_line_length(text: str) -> int:
    """Length of the longest line of ``text`` (linear: one pass over the newlines)."""
    longest, start = 0, 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            return max(longest, len(text) - start)
        longest = max(longest, end - start)
        start = end + 1


def parse_report(data: Any, json_checked: bool = False) -> Report:
    """Validate decoded JSON against the contract (:func:`json_problems` first: depth,
    NaN/Infinity, NUL, lone surrogates; then the models' limits). ``json_checked``: the
    caller vouches that :func:`json_problems` finds nothing (a parser that refuses those
    values read the text, and :func:`shallow_text` passed it), so only the models run.

    Returns the :class:`Report`. Raises :class:`ReportError` listing the JSON
    path of every bad field.
    """
    problems = [] if json_checked else json_problems(data)
    if problems:
        raise ReportError("report does not match the contract", problems)
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        details = [
            {"path": error_path(err["loc"]), "message": err["msg"]} for err in exc.errors()
        ]
        raise ReportError("report does not match the contract", details) from exc
