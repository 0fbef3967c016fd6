"""The served model's own description, read from disk: ``servers[].model_files``.

What is read (nothing else from the model directory), all bounded:

* ``config.json`` (at most :data:`MAX_CONFIG_BYTES`; a larger or unparsable file is reported
  in ``errors``, never sent truncated). Nested sub-configs are kept whole when they describe
  the text decoder (``text_config``, ``llm_config``, ``language_config``...) and reduced to
  their scalar fields otherwise (``vision_config``, ``audio_config``), so the geometry the
  dashboard needs survives while a tower's long lists do not;
* ``generation_config.json``, ``hf_quant_config.json`` and ``quantize_config.json`` (64 KiB);
* the weights' size: ``model.safetensors.index.json`` ``metadata.total_size`` (16 MiB read
  limit: indexes of 1T-parameter checkpoints are ~2 MB), else the sum of ``*.safetensors``
  file sizes (stat only; HF cache snapshots are symlinks to ``blobs/``, stat follows them);
* the same for a local draft model of ``--speculative-config`` (``speculator``).

Where: ``--model`` or the positional model; an absolute/relative path or a directory holding
``config.json`` is a local model; otherwise an HF repo id resolved in the hub cache
(``--download-dir`` > ``HF_HUB_CACHE`` > ``HUGGINGFACE_HUB_CACHE`` > ``HF_HOME/hub`` >
``$HOME/.cache/huggingface/hub``, see :func:`fleet_agent.ondisk.hf_cache_root`), revision
``--revision`` (a 40-hex commit is used as is; a branch/tag through ``refs/<name>``). Paths
are read as the process sees them, through ``/proc/<pid>/root`` (a container's own cache).

Access: the agent usually runs as root. A file is read only when the vLLM process itself
could read it (:func:`readable_by`: its uid/gids from ``/proc/<pid>/status`` against the
file's owner, group and mode bits), so a local user cannot point ``--model`` at another
user's files and have the agent ship them. When the process's ids are unknown, only
world-readable files are read.
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet_agent import procfs
from fleet_agent.discovery import (
    ServerProcess,
    option_value,
    positional_model,
    resolve_in_process,
)
from fleet_agent.ondisk import hf_cache_root

#: Largest ``config.json`` sent (the contract's limit: 256 KiB).
MAX_CONFIG_BYTES = 256 << 10
#: Largest small side file (generation/quantisation configs).
MAX_SIDE_BYTES = 64 << 10
#: Largest safetensors index read (DeepSeek-V3's is ~1.6 MB; 1T-parameter MoE ~2-3 MB).
MAX_INDEX_BYTES = 16 << 20
#: Longest list kept inside a config (``layer_types`` of a 128-layer model fits easily).
MAX_LIST_ITEMS = 1024
#: Most ``*.safetensors`` files stat-ed when there is no index.
MAX_SHARDS = 4096
#: Sub-configs kept whole: they describe the text decoder whose KV the engine allocates.
TEXT_SUBCONFIGS = ("text_config", "llm_config", "language_config", "thinker_config",
                   "rope_scaling", "rope_parameters", "quantization_config",
                   "compression_config")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class ProcessIds:
    """Real/effective uid and every gid of a process (``/proc/<pid>/status``)."""

    uids: frozenset[int]
    gids: frozenset[int]


def process_ids(root: Path, pid: int) -> ProcessIds | None:
    """The process's uids and gids (Uid, Gid, Groups lines), None when unreadable."""
    data = procfs.read_bytes(root / "proc" / str(pid) / "status", 64 << 10)
    if data is None:
        return None
    fields: dict[str, list[int]] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            try:
                fields[key] = [int(v) for v in value.split()]
            except ValueError:
                return None
    if not fields.get("Uid") or not fields.get("Gid"):
        return None
    # Uid: real, effective, saved, filesystem; the fs uid decides file access.
    return ProcessIds(uids=frozenset(fields["Uid"][1:4] or fields["Uid"]),
                      gids=frozenset(fields["Gid"][1:4] + fields.get("Groups", [])))


def _allowed(st: os.stat_result, ids: ProcessIds | None, bits: tuple[int, int, int]) -> bool:
    """Owner/group/other permission check of ``st`` for ``ids`` (``bits``: usr, grp, oth)."""
    usr, grp, oth = bits
    if ids is None:
        return bool(st.st_mode & oth)
    if 0 in ids.uids:
        return True
    if st.st_uid in ids.uids:
        return bool(st.st_mode & usr)
    if st.st_gid in ids.gids:
        return bool(st.st_mode & grp)
    return bool(st.st_mode & oth)


def readable_by(path: Path, ids: ProcessIds | None, within: Path | None = None) -> bool:
    """True when a process with ``ids`` may read ``path``: read permission on the final
    target and search (x) permission on every directory from ``within`` (the process's root
    as the agent sees it) down to it, as the kernel would check for that process.

    ``ids`` None: world-readable/searchable only. uid 0 reads everything.
    """
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not _allowed(st, ids, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)):
        return False
    if within is None:
        return True
    search = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    for parent in path.parents:
        if parent == within or within not in parent.parents:
            break
        try:
            if not _allowed(os.stat(parent), ids, search):
                return False
        except OSError:
            return False
    return True


class _Reader:
    """Reads files as one process would see them, with its rights, bounded."""

    def __init__(self, root: Path, server: ServerProcess):
        self.root, self.server = root, server
        self.ids = process_ids(root, server.pid)
        self.within = root / "proc" / str(server.pid) / "root"

    def host_paths(self, path: str) -> list[Path]:
        return resolve_in_process(self.root, self.server, path)

    def read(self, path: str, limit: int) -> bytes | None:
        """At most ``limit`` bytes of the first readable candidate, None when none is."""
        for candidate in self.host_paths(path):
            if candidate.is_file() and readable_by(candidate, self.ids, self.within):
                data = procfs.read_bytes(candidate, limit)
                if data is not None:
                    return data
        return None

    def shard_sizes(self, directory: str) -> int | None:
        """Sum of ``*.safetensors`` sizes in ``directory``, None when there are none."""
        for candidate in self.host_paths(directory):
            if not candidate.is_dir() or not readable_by(candidate, self.ids, self.within):
                continue
            names = sorted(glob.glob(str(candidate / "*.safetensors")))[:MAX_SHARDS]
            sizes = []
            for name in names:
                try:
                    sizes.append(os.stat(name).st_size)
                except OSError:
                    continue
            if sizes:
                return sum(sizes)
        return None


def _trim(value: Any, depth: int = 0) -> Any:
    """Lists capped at :data:`MAX_LIST_ITEMS`; nesting capped at 6 levels."""
    if depth > 6:
        return None
    if isinstance(value, dict):
        return {str(k): _trim(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_trim(v, depth + 1) for v in value[:MAX_LIST_ITEMS]]
    return value


def slim_config(config: dict[str, Any]) -> dict[str, Any]:
    """Top-level fields and text sub-configs whole; other sub-configs' scalars only."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and key not in TEXT_SUBCONFIGS:
            out[key] = {k: v for k, v in value.items()
                        if isinstance(v, (str, int, float, bool)) or v is None}
        else:
            out[key] = _trim(value)
    return out


def _json(data: bytes | None, name: str, limit: int,
          errors: list[str]) -> dict[str, Any] | None:
    if data is None:
        return None
    if len(data) > limit:
        errors.append(f"{name} larger than {limit >> 10} KiB: not sent")
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        errors.append(f"{name} is not valid JSON (truncated or corrupt)")
        return None
    if not isinstance(value, dict):
        errors.append(f"{name} is not a JSON object")
        return None
    return value


def locate(reader: _Reader, model: str, args: list[str],
           revision: str | None) -> tuple[str | None, str | None, str | None]:
    """(directory as the process sees it, ``source`` label, error) for ``model``."""
    if model.startswith(("/", ".")) or model.count("/") != 1 \
            or reader.read(f"{model.rstrip('/')}/config.json", 1) is not None:
        return model.rstrip("/") or "/", model, None
    cache = hf_cache_root(reader.server, args)
    repo_dir = f"{cache}/models--{model.replace('/', '--')}"
    wanted = revision or "main"
    commit = wanted if _COMMIT.match(wanted) else None
    if commit is None:
        ref = reader.read(f"{repo_dir}/refs/{wanted}", 256)
        commit = ref.decode("ascii", "replace").strip() if ref else None
        if commit and not _COMMIT.match(commit):
            return None, None, f"{model}: refs/{wanted} does not hold a commit hash"
    if not commit:
        return None, None, f"{model}@{wanted} not in HF cache {cache}"
    return f"{repo_dir}/snapshots/{commit}", f"hf-cache:{model}@{commit}", None


def read_model_dir(reader: _Reader, directory: str, source: str) -> dict[str, Any]:
    """The ``model_files`` fields for one model directory (``errors`` lists what lacked)."""
    errors: list[str] = []
    out: dict[str, Any] = {"source": source, "errors": errors}
    raw = reader.read(f"{directory}/config.json", MAX_CONFIG_BYTES + 1)
    config = _json(raw, "config.json", MAX_CONFIG_BYTES, errors)
    if raw is None:
        errors.append(f"config.json not readable in {source}")
    out["config"] = slim_config(config) if config else None
    out["generation_config"] = _json(reader.read(f"{directory}/generation_config.json",
                                                 MAX_SIDE_BYTES + 1),
                                     "generation_config.json", MAX_SIDE_BYTES, errors)
    quant = (config or {}).get("quantization_config")
    side = None
    for name in ("hf_quant_config.json", "quantize_config.json"):
        side = side or _json(reader.read(f"{directory}/{name}", MAX_SIDE_BYTES + 1), name,
                             MAX_SIDE_BYTES, errors)
    out["quantization_config"] = _trim(quant) if isinstance(quant, dict) else _trim(side)
    out["hf_quant_config"] = _trim(side)
    out["weights_bytes"] = _weights_bytes(reader, directory, errors)
    out["weights_dtype"] = _weights_dtype(config or {}, out["quantization_config"])
    return out


def _weights_bytes(reader: _Reader, directory: str, errors: list[str]) -> int | None:
    index = _json(reader.read(f"{directory}/model.safetensors.index.json", MAX_INDEX_BYTES + 1),
                  "model.safetensors.index.json", MAX_INDEX_BYTES, errors)
    total = ((index or {}).get("metadata") or {}).get("total_size")
    if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
        return int(total)
    return reader.shard_sizes(directory)


def _weights_dtype(config: dict[str, Any], quant: dict[str, Any] | None) -> str | None:
    """Quantisation method when the checkpoint is quantised, else ``torch_dtype``/``dtype``."""
    method = (quant or {}).get("quant_method") or \
        ((quant or {}).get("quantization") or {}).get("quant_algo")
    if isinstance(method, str) and method:
        return method.lower()
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for source in (config, text):
        for key in ("torch_dtype", "dtype"):
            if isinstance(source.get(key), str):
                return source[key]
    return None


def model_files(root: Path, server: ServerProcess) -> dict[str, Any] | None:
    """``servers[].model_files`` for one process, None when argv names no model."""
    args = server.options()
    model = option_value(args, "--model") or positional_model(args)
    if not model:
        return None
    reader = _Reader(root, server)
    out = _one(reader, model, args, option_value(args, "--revision"))
    spec = _speculator_model(option_value(args, "--speculative-config"))
    if spec:
        out["speculator"] = _one(reader, spec, args, None)
    return out


def _one(reader: _Reader, model: str, args: list[str], revision: str | None) -> dict[str, Any]:
    directory, source, error = locate(reader, model, args, revision)
    if directory is None:
        return {"source": None, "errors": [error or f"{model}: not found"]}
    return read_model_dir(reader, directory, source or model)


def _speculator_model(value: str | None) -> str | None:
    """The draft ``model`` of ``--speculative-config`` JSON (None for ngram/no model)."""
    if not value:
        return None
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return None
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model if isinstance(model, str) and model else None
