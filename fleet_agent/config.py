"""Agent configuration: a small TOML file, read with tomllib/tomli, written by hand.

Default path ``/etc/fleet-agent/config.toml``; env ``FLEET_AGENT_CONFIG`` overrides it,
``--config`` overrides both. The file holds the host token, so it is written 0600.
Example::

    server_url = "https://fleet.example.com"
    token = "fa_..."
    interval_s = 30
    spool_dir = "/var/lib/fleet-agent/spool"
    spool_max_reports = 2880
    spool_max_bytes = 209715200
    gpu_source = "nvml"

    [labels]
    team = "inference"

    [[servers]]             # override the URL of a discovered server (Docker bridge, proxy)
    match_port = 8000       # or match_pid = 1234
    base_url = "http://10.0.0.5:8000"
    api_key = "sk-..."      # used for GET /v1/models only, never sent to the dashboard

    [[servers]]             # a server the agent cannot see as a process
    base_url = "http://10.0.0.7:8000"
    argv = ["vllm", "serve", "google/gemma-4-31B-it", "--max-model-len", "65536"]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (Ubuntu 22.04): the tomli backport, a declared dependency
    import tomli as tomllib

DEFAULT_CONFIG_PATH = "/etc/fleet-agent/config.toml"
CONFIG_ENV = "FLEET_AGENT_CONFIG"
DEFAULT_SPOOL_DIR = "/var/lib/fleet-agent/spool"
#: One day of 30 s reports.
DEFAULT_SPOOL_MAX_REPORTS = 2880
#: 200 MiB of gzipped reports.
DEFAULT_SPOOL_MAX_BYTES = 200 * 1024 * 1024
#: Seconds between collections (the contract's example `interval_s`).
DEFAULT_INTERVAL_S = 30
#: Cycles between scheduled raw /metrics texts: hourly at the default interval
#: (``fleet_agent.metrics_compact.DEFAULT_TEXT_EVERY``).
DEFAULT_METRICS_TEXT_EVERY = 120


class ConfigError(ValueError):
    """The config file is unreadable or a key has the wrong type; the message names the key."""


@dataclass
class ServerOverride:
    """A ``[[servers]]`` entry: URL/api key for a discovered server, or an undiscoverable one."""

    base_url: str | None = None
    match_pid: int | None = None
    match_port: int | None = None
    api_key: str | None = None
    container_image: str | None = None
    argv: list[str] | None = None
    pid: int = 1

    def matches(self, pid: int, port: int | None) -> bool:
        """True when this entry refers to the discovered server ``pid`` listening on ``port``."""
        if self.match_pid is not None:
            return self.match_pid == pid
        return self.match_port is not None and self.match_port == port

    @property
    def is_remote(self) -> bool:
        """An entry that matches no process: it describes a server by URL and argv."""
        return self.match_pid is None and self.match_port is None


@dataclass
class AgentConfig:
    """Everything the agent reads from its config file (all keys optional)."""

    server_url: str | None = None
    token: str | None = None
    interval_s: int = DEFAULT_INTERVAL_S
    spool_dir: str = DEFAULT_SPOOL_DIR
    spool_max_reports: int = DEFAULT_SPOOL_MAX_REPORTS
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    gpu_source: str = "nvml"
    root: str = "/"
    labels: dict[str, str] = field(default_factory=dict)
    servers: list[ServerOverride] = field(default_factory=list)
    #: Cycles between two raw /metrics texts when no name change or dashboard request asks
    #: for one (fleet_agent/metrics_compact.py; 0: never on a schedule).
    metrics_text_every: int = DEFAULT_METRICS_TEXT_EVERY

    @property
    def state_path(self) -> Path:
        """``state.json`` next to the spool directory."""
        return Path(self.spool_dir).parent / "state.json"


_SCALARS: dict[str, type] = {
    "server_url": str, "token": str, "interval_s": int, "spool_dir": str,
    "spool_max_reports": int, "spool_max_bytes": int, "gpu_source": str, "root": str,
    "metrics_text_every": int,
}
_SERVER_KEYS: dict[str, type] = {
    "base_url": str, "match_pid": int, "match_port": int, "api_key": str,
    "container_image": str, "argv": list, "pid": int,
}


def config_path(cli_value: str | None) -> Path:
    """``--config`` value, else ``$FLEET_AGENT_CONFIG``, else the default path."""
    return Path(cli_value or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def load(path: Path, missing_ok: bool = True) -> AgentConfig:
    """Read ``path``; a missing file gives defaults when ``missing_ok``. Raises ConfigError."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        if missing_ok:
            return _state_beside(AgentConfig(), path, {})
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return _state_beside(from_dict(data, str(path)), path, data)


def _state_beside(cfg: AgentConfig, path: Path, data: dict[str, Any]) -> AgentConfig:
    """A config elsewhere than :data:`DEFAULT_CONFIG_PATH` that names no ``spool_dir`` keeps
    its state beside itself (``<config dir>/spool``, ``<config dir>/state.json``): ``run
    --config X`` as a user never writes under ``/var/lib/fleet-agent``."""
    if "spool_dir" not in data and Path(path) != Path(DEFAULT_CONFIG_PATH):
        cfg.spool_dir = str(Path(path).resolve().parent / "spool")
    return cfg


def _typed(where: str, key: str, value: Any, kind: type) -> Any:
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise ConfigError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
    return value


def from_dict(data: dict[str, Any], where: str = "config") -> AgentConfig:
    """Build an :class:`AgentConfig` from parsed TOML. Raises ConfigError on bad types."""
    cfg = AgentConfig()
    for key, kind in _SCALARS.items():
        if key in data:
            setattr(cfg, key, _typed(where, key, data[key], kind))
    if cfg.metrics_text_every < 0:
        raise ConfigError(f"{where}: metrics_text_every must be >= 0")
    if cfg.interval_s < 1:
        raise ConfigError(f"{where}: interval_s must be >= 1")
    labels = data.get("labels", {})
    if not isinstance(labels, dict):
        raise ConfigError(f"{where}: [labels] must be a table")
    cfg.labels = {str(k): str(v) for k, v in labels.items()}
    for i, entry in enumerate(data.get("servers", [])):
        cfg.servers.append(_server(f"{where}: servers[{i}]", entry))
    return cfg


def _server(where: str, entry: Any) -> ServerOverride:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table")
    values = {k: _typed(where, k, v, _SERVER_KEYS[k]) for k, v in entry.items()
              if k in _SERVER_KEYS}
    override = ServerOverride(**values)
    if override.argv is not None and not all(isinstance(w, str) for w in override.argv):
        raise ConfigError(f"{where}: argv must be a list of strings")
    if override.is_remote and not (override.base_url and override.argv):
        raise ConfigError(f"{where}: a server without match_pid/match_port needs base_url "
                          "and argv (the command line it was started with)")
    return override


def _toml_str(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_str(str(value))


def dumps(cfg: AgentConfig) -> str:
    """Serialise to TOML (the fixed key set above; no third-party writer needed)."""
    lines = ["# fleet-agent configuration (written by fleet-agent; holds the host token)"]
    defaults = AgentConfig()
    for key in _SCALARS:
        value = getattr(cfg, key)
        keep = key in ("interval_s", "spool_dir")  # spool_dir: a moved config keeps it
        if value is not None and (value != getattr(defaults, key) or keep):
            lines.append(f"{key} = {_toml_value(value)}")
    if cfg.labels:
        lines += ["", "[labels]"] + [f"{_toml_str(k)} = {_toml_str(v)}"
                                     for k, v in sorted(cfg.labels.items())]
    for server in cfg.servers:
        lines += ["", "[[servers]]"]
        for key in _SERVER_KEYS:
            value = getattr(server, key)
            if value is not None and not (key == "pid" and value == 1):
                lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def save(cfg: AgentConfig, path: Path) -> None:
    """Write atomically with mode 0600 (the file holds the host token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps(cfg))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
