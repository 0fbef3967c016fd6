"""The agent report wire contract (``docs/wire-contract.md``) as pydantic models.

One :class:`Report` per host per collection cycle. The dashboard validates every
POSTed body with :func:`parse_report`; the agent builds its reports with the same
models, so a field renamed on one side breaks the tests of the other.

Extension policy: fields may be added (all optional, defaulting to ``None`` or an
empty list), never renamed or dropped. Unknown fields are accepted and kept
(``extra="allow"``) so an older dashboard stores what a newer agent sends.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

#: Every ``schema_version`` this code accepts. Unknown versions are refused (400).
SUPPORTED_SCHEMA_VERSIONS: tuple[int, ...] = (1,)

#: Replacement for secret values (``--api-key``, ``HF_TOKEN`` ...). The flag stays.
REDACTED = "REDACTED"

#: Largest accepted report after gzip decompression, in bytes (contract: 4 MiB).
MAX_REPORT_BYTES = 4 * 1024 * 1024


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
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class AgentInfo(_Model):
    """Who sent the report. ``interval_s`` is the agent's collection interval in seconds."""

    version: str = Field(max_length=64)
    interval_s: int = Field(ge=1, le=86400)
    spool_dropped: int = Field(default=0, ge=0)
    spool_depth: int | None = Field(default=None, ge=0)


class HostInfo(_Model):
    """The node. ``machine_id`` is its stable identity (``/etc/machine-id``)."""

    hostname: str = Field(min_length=1, max_length=255)
    machine_id: str = Field(min_length=1, max_length=255)
    os: str | None = None
    kernel: str | None = None
    nvidia_driver_version: str | None = None
    cuda_driver_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class GpuInfo(_Model):
    """One GPU as NVML reports it. Memory in bytes, power in watts, temperature in °C."""

    index: int = Field(ge=0)
    uuid: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=255)
    memory_total_bytes: int | None = Field(default=None, ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    utilization_gpu_pct: float | None = Field(default=None, ge=0, le=100)
    temperature_c: float | None = None
    power_draw_w: float | None = Field(default=None, ge=0)
    power_limit_w: float | None = Field(default=None, ge=0)
    ecc_errors_uncorrected: int | None = Field(default=None, ge=0)
    xid_errors: list[int] = Field(default_factory=list)


class ModelCard(_Model):
    """One entry of the server's ``GET /v1/models``; ``max_model_len`` in tokens."""

    id: str = Field(min_length=1, max_length=512)
    root: str | None = None
    max_model_len: int | None = Field(default=None, ge=1)


class ChatTemplate(_Model):
    """The chat template the server uses: where it came from, its sha256 and size in bytes."""

    source: str | None = None
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)
    revision: str | None = None

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class MetricsScrape(_Model):
    """The ``/metrics`` body exactly as vLLM served it (renames are handled server-side)."""

    format: Literal["prometheus-text"] = "prometheus-text"
    scraped_at: UtcDatetime
    text: str


class ServerInfo(_Model):
    """One vLLM API-server process (not its EngineCore/worker children)."""

    pid: int = Field(ge=1)
    started_at: UtcDatetime | None = None
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    container_image: str | None = None
    base_url: str | None = None
    gpu_uuids: list[str] = Field(default_factory=list)
    vllm_version: str | None = None
    installed_vllm_version: str | None = None
    models: list[ModelCard] = Field(default_factory=list)
    chat_template: ChatTemplate | None = None
    metrics: MetricsScrape | None = None
    errors: list[str] = Field(default_factory=list)
    # Added by the agent (issue 3); all optional.
    cwd: str | None = None
    port: int | None = Field(default=None, ge=0, le=65535)
    listen_ports: list[int] = Field(default_factory=list)
    model_revision: str | None = None
    discovered: bool | None = None  # False: declared in the agent config, not seen in /proc


class GpuProcess(_Model):
    """A process holding a GPU (NVML compute processes); pid in the host pid namespace."""

    gpu_uuid: str = Field(min_length=1, max_length=128)
    pid: int = Field(ge=1)
    used_memory_bytes: int | None = Field(default=None, ge=0)


class Report(_Model):
    """One host's report for one collection cycle (schema_version 1)."""

    schema_version: int
    report_id: UUID
    collected_at: UtcDatetime
    agent: AgentInfo
    host: HostInfo
    gpus: list[GpuInfo] = Field(default_factory=list)
    gpu_error: str | None = None
    servers: list[ServerInfo] = Field(default_factory=list)
    gpu_processes: list[GpuProcess] = Field(default_factory=list)  # added by issue 3

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


def parse_report(data: Any) -> Report:
    """Validate decoded JSON against the contract.

    Returns the :class:`Report`. Raises :class:`ReportError` listing the JSON
    path of every bad field.
    """
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        details = [
            {"path": error_path(err["loc"]), "message": err["msg"]} for err in exc.errors()
        ]
        raise ReportError("report does not match the contract", details) from exc
