"""The recommended command as data: flag values with their reasons, rendered to argv.

A :class:`Plan` starts from the server's current argv (so the operator's own flags such as
``--served-model-name``, ``--port`` or ``--api-key`` survive) and is then changed flag by
flag; every decided flag carries a :class:`Choice` (reason, references, and the
"What was NOT measured" item when the value is extrapolated, R6).

Values are keyed by vLLM setting (``dest``); the command is written with the table of the
plan's target release (:func:`target_release`, ``audit/kb/data/vllm/<release>.json``): each
flag spelled as that release spells it, left out when the value is that release's default,
never written when that release lacks the setting (:func:`left_out` says so instead), and
booleans in that release's form (``--x`` / ``--no-x``; a plain store_true flag has no off
form).
"""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from audit.kb import vllm_tables
from audit.kb.flags_defaults import REMOVED_FLAGS
from fleet_agent import shellwords

# argv order: the flags operators read first come first.
ORDER = (
    "served_model_name", "host", "port", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
    "max_num_batched_tokens", "kv_cache_dtype", "quantization", "dtype", "revision",
    "chat_template", "default_chat_template_kwargs", "enable_auto_tool_choice",
    "reasoning_parser", "tool_call_parser", "speculative_config",
    "scheduler_reserve_full_isl",
)


@dataclass
class Choice:
    """Why a flag has its recommended value.

    ``extrapolated`` names what the seeds did not measure (None when measured or when the
    value is a correctness fix rather than a tuning point); ``removed`` marks a flag to drop.
    """

    reason: str
    references: list[str]
    extrapolated: str | None = None
    removed: bool = False


@dataclass
class Plan:
    """Recommended configuration for one server.

    ``values``: snake_case flag -> value (None = not set); ``why``: decided flags;
    ``unknown``: argv tokens we do not know, kept verbatim; ``groups``: GPU dicts per
    replica; ``version``: vLLM release to run; ``template``: chat_template fingerprint the
    command serves (for the self-check); ``notes``: operator-facing text; ``env``: variables
    the command sets (written before ``vllm serve`` and as ``docker -e``).
    """

    model: str | None
    values: dict[str, Any] = field(default_factory=dict)
    why: dict[str, Choice] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    groups: list[list[dict[str, Any]]] = field(default_factory=list)
    version: str | None = None
    template: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: Environment variables the command sets (NAME -> value), e.g. NCCL_P2P_DISABLE=1.
    env: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: Any, reason: str, references: list[str],
            extrapolated: str | None = None) -> None:
        """Decide ``key`` = ``value`` (None removes it) with its reason."""
        self.values[key] = value
        self.why[key] = Choice(reason, list(references), extrapolated, removed=value is None)

    def drop(self, key: str, reason: str, references: list[str]) -> None:
        """Remove ``key`` from the command."""
        self.set(key, None, reason, references)

    def clone(self) -> Plan:
        """Deep copy (the version search tries variants)."""
        return copy.deepcopy(self)

    @property
    def tp(self) -> int:
        """Tensor-parallel size of each replica."""
        value = self.values.get("tensor_parallel_size")
        return value if isinstance(value, int) and value > 0 else 1


def target_release(plan: Plan) -> str:
    """The known release whose table writes ``plan``'s command: the nearest at or below
    ``plan.version`` (:func:`audit.kb.vllm_tables.table_release`; newest when unknown)."""
    return vllm_tables.table_release(plan.version)[0]


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is the table's ``default`` (``True`` is not ``1``; ``0.9`` is
    ``0.90``)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, (int, float)) and isinstance(default, (int, float)):
        return float(value) == float(default)
    return value == default


def _off_form(flag: str, opt: dict[str, Any]) -> str | None:
    """The spelling that turns a boolean option off: ``--no-<flag>`` where the table lists
    it (every BooleanOptionalAction option since 0.8.5), else the first other negative
    (0.33's ``--disable-x``); None for a plain store_true flag."""
    negatives = [n for n in opt.get("negative") or [] if "_" not in n]
    preferred = "--no-" + flag[2:]
    return preferred if preferred in negatives else (negatives[0] if negatives else None)


def render_flag(key: str, value: Any, release: str) -> tuple[list[str], str | None]:
    """(argv tokens, why left out) for setting ``key`` = ``value`` on vLLM ``release``.

    Tokens are [] when the value is None or [], equals the release's default, or cannot be
    written on that release; the reason is given only for the last case (the setting is
    not in the release's table, or a store_true flag would have to be turned off).
    """
    if value is None or value == []:
        return [], None
    flag = vllm_tables.dest_index(release).get(key)
    if flag is None:
        return [], _absent(key, release)
    if not flag.startswith("-"):
        return [], None  # a positional (the model): render_argv writes it
    opt = vllm_tables.option(release, flag)
    if _same(value, opt.get("default")):
        return [], None
    if opt["takes"] == "none":
        if value is True or (opt.get("const") is not None and value == opt["const"]):
            return [flag], None
        off = _off_form(flag, opt) if value is False else None
        if off:
            return [off], None
        return [], (f"{flag} cannot be set to {display(value)} on vLLM {release} (a plain "
                    "switch there): left out")
    if opt["takes"] == "optional" and (value is True or value == opt.get("const")):
        return [flag], None  # nargs='?': the bare flag stores its const
    return [flag, *_value_tokens(value, opt, flag)], None


def _value_tokens(value: Any, opt: dict[str, Any], flag: str) -> list[str]:
    """The value after the flag, by the option's ``takes`` and ``type`` in the table."""
    kind = str(opt.get("type") or "")
    if isinstance(value, dict) or (isinstance(value, list) and kind.startswith("json")):
        return [json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list):
        if opt["takes"] == "many":
            return [_scalar_text(v) for v in value]
        if kind.startswith("append["):  # one value per occurrence of the flag
            return [item for v in value for item in (flag, _scalar_text(v))][1:]
        return [",".join(_scalar_text(v) for v in value)]
    return [_scalar_text(value)]


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _absent(key: str, release: str) -> str:
    """Operator note for a setting ``release`` lacks: when it was removed or added, and the
    sourced replacement (flags_defaults.REMOVED_FLAGS) when there is one."""
    name = "--" + key.replace("_", "-")
    having = vllm_tables.dest_releases(key)
    text = f"{name} is not an option of vLLM {release}"
    older = [r for r in having if Version(r) < Version(release)]
    if having and len(older) == len(having):
        text += f" (last in {having[-1]})"
    elif having and not older:
        text += f" (added in {having[0]})"
    replacement = next((r[2] for r in REMOVED_FLAGS if r[0] == key), None)
    text += ": left out of the command"
    return text + (f"; use {replacement} instead" if replacement else "")


def render_value(key: str, value: Any, release: str) -> list[str]:
    """argv tokens for one setting on ``release`` (see :func:`render_flag`)."""
    return render_flag(key, value, release)[0]


def left_out(plan: Plan) -> list[str]:
    """Why each setting of ``plan`` is missing from its command (the target release lacks
    it, or cannot write the value), one operator note per setting, in argv order."""
    release = target_release(plan)
    notes = (render_flag(k, plan.values[k], release)[1] for k in ordered_keys(plan.values))
    return [n for n in notes if n]


def ordered_keys(values: dict[str, Any]) -> list[str]:
    """Flag keys in argv order: :data:`ORDER` first, then the rest as given."""
    first = [k for k in ORDER if k in values]
    return first + [k for k in values if k not in ORDER and k != "model"]


def render_argv(plan: Plan, port: int | None = None) -> list[str]:
    """``vllm serve MODEL --flag value …`` for one replica, written for
    :func:`target_release` (see the module docstring). ``port``: the replica's pinned port,
    always written, even when it is the release's default (8000): replicas sharing a host
    differ only by it, and the docker ``-p`` mapping names it."""
    values = dict(plan.values)
    if port is not None:
        values["port"] = port
    release = target_release(plan)
    argv = ["vllm", "serve", str(plan.model)]
    for key in ordered_keys(values):
        tokens = render_value(key, values[key], release)
        if key == "port" and port is not None and not tokens:  # the default port, pinned
            tokens = [vllm_tables.dest_index(release).get("port", "--port"), str(port)]
        argv += tokens
    for token in plan.unknown:
        argv += token.split(" ", 1)
    return argv


def _platform(plan: Plan) -> str:
    """"rocm" when the replica's GPUs are AMD (NVML/amdsmi name or vendor), "ascend" for
    Huawei Ascend NPUs, else "cuda"."""
    first = next((gpu for group in plan.groups for gpu in group), {}) or {}
    text = f"{first.get('vendor') or ''} {first.get('name') or ''}".lower()
    if any(w in text for w in ("huawei", "ascend")):
        return "ascend"
    return "rocm" if any(w in text for w in ("amd", "instinct", "radeon")) else "cuda"


#: vLLM Ascend's published image and the host devices/driver its quick start mounts
#: (https://docs.vllm.ai/projects/ascend/en/latest/getting_started/quick_start.html).
ASCEND_IMAGE = "quay.io/ascend/vllm-ascend:latest"
ASCEND_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
ASCEND_MOUNTS = ("/usr/local/dcmi:/usr/local/dcmi",
                 "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
                 "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
                 "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
                 "/etc/ascend_install.info:/etc/ascend_install.info")


def image_for(plan: Plan) -> tuple[str, str | None]:
    """(image, note) for ``docker run``: ``vllm/vllm-openai:vX.Y.Z`` only for a release the
    knowledge base has a table for (``audit/kb/data/vllm/<release>.json``: published releases,
    so the tag exists); an rc/dev build or an unknown release gets the unpinned image and a
    note. An AMD/ROCm host never gets the CUDA image: ``rocm/vllm`` (AMD's published vLLM
    image, https://hub.docker.com/r/rocm/vllm), unpinned because its tags do not follow vLLM's.
    """
    from audit.kb.vllm_tables import releases

    if _platform(plan) == "ascend":
        return ASCEND_IMAGE, ("Ascend NPUs: vLLM Ascend's image (its tags follow vLLM Ascend "
                              "releases; pick the one carrying "
                              f"vLLM {plan.version or 'the recommended release'})")
    if _platform(plan) == "rocm":
        return "rocm/vllm:latest", ("AMD GPUs: AMD's ROCm image rocm/vllm (its tags do not "
                                    "follow vLLM releases; pick the one carrying "
                                    f"vLLM {plan.version or 'the recommended release'})")
    if plan.version and plan.version in releases():
        return f"vllm/vllm-openai:v{plan.version}", None
    return "vllm/vllm-openai:latest", (f"no published image is known for vLLM "
                                       f"{plan.version or 'this server'}: the command runs "
                                       "the latest release image; pin the release you test")


def model_mount(plan: Plan) -> list[str]:
    """``-v PATH:PATH:ro`` when the model is served from a local path (``/model``), so the
    container sees the same weights; a Hugging Face id needs only the cache mount."""
    model = str(plan.model or "")
    return ["-v", f"{model}:{model}:ro"] if model.startswith("/") and ":" not in model else []


def docker_argv(plan: Plan, gpu_indices: list[int], port: int) -> list[str]:
    """``docker run … IMAGE MODEL flags`` for one replica (the image's entrypoint is
    ``vllm serve`` since vLLM 0.11.0, PR #25967); the image from :func:`image_for`, the
    model's own directory mounted when it is a local path."""
    image, _ = image_for(plan)
    devices = ",".join(str(i) for i in gpu_indices)
    if _platform(plan) == "ascend":
        gpus = [f"--device=/dev/davinci{i}" for i in gpu_indices]
        gpus += [f"--device={d}" for d in ASCEND_DEVICES]
        for mount in ASCEND_MOUNTS:
            gpus += ["-v", mount]
    elif _platform(plan) == "rocm":
        # ROCm containers take the kernel devices, not --gpus (AMD's vLLM docker guide).
        gpus = ["--device=/dev/kfd", "--device=/dev/dri", "--group-add=video",
                "-e", f"HIP_VISIBLE_DEVICES={devices}"]
    else:
        gpus = ["--gpus", f'"device={devices}"']
    for name, value in sorted(plan.env.items()):
        gpus += ["-e", f"{name}={value}"]
    head = ["docker", "run", "-d", *gpus, "--ipc=host",
            "-p", f"{port}:{port}", "-v", HF_CACHE_MOUNT, *model_mount(plan)]
    if isinstance(plan.values.get("chat_template"), str) and \
            plan.values["chat_template"].startswith("/templates/"):
        head += ["-v", "/templates:/templates:ro"]
    # vLLM Ascend's image opens a shell (its quick start runs `vllm serve` inside it).
    tail = render_argv(plan, port) if _platform(plan) == "ascend" else render_argv(plan, port)[2:]
    return head + [image] + tail


def visible_devices_var(plan: Plan) -> str:
    """The environment variable that pins a replica to its devices on this platform
    (CUDA_VISIBLE_DEVICES; HIP_VISIBLE_DEVICES on ROCm; ASCEND_RT_VISIBLE_DEVICES on Ascend,
    vLLM Ascend's docs)."""
    return {"rocm": "HIP_VISIBLE_DEVICES", "ascend": "ASCEND_RT_VISIBLE_DEVICES"}.get(
        _platform(plan), "CUDA_VISIBLE_DEVICES")


class HomeToken(str):
    """A token the planner itself wrote whose leading ``$HOME`` the shell must expand.

    Only :data:`HF_CACHE_MOUNT` is one; a plain ``str`` (anything that came from an agent's
    report: model, flag values, image names) never expands, whatever it starts with.
    """


#: The planner's fixed Hugging Face cache mount (the only token whose ``$HOME`` expands).
HF_CACHE_MOUNT = HomeToken("$HOME/.cache/huggingface:/root/.cache/huggingface")


def shell_quote(token: str) -> str:
    """One argv token for a POSIX shell: :func:`fleet_agent.shellwords.quote` (single quotes,
    nothing inside expands; control characters as ``$'\\xNN'``), except a
    :class:`HomeToken`, written ``"$HOME"'<rest>'``."""
    if isinstance(token, HomeToken) and token.startswith("$HOME"):
        rest = token[len("$HOME"):]
        # shlex's safe characters mean nothing inside double quotes either.
        return f'"$HOME{rest}"' if shlex.quote(rest) == rest else '"$HOME"' + shellwords.quote(rest)
    return shellwords.quote(token)


def shell_join(argv: list[str]) -> str:
    """``argv`` as one line an operator can paste into a POSIX shell, every token through
    :func:`shell_quote`: agent data (``$HOME/$(…)``, backticks, ``;``, newlines) stays
    literal text; only the planner's own :data:`HF_CACHE_MOUNT` expands ``$HOME``."""
    return " ".join(shell_quote(token) for token in argv)


def env_assignment(name: str, value: str) -> str:
    """``NAME=value`` for a command prefix, the value quoted (``name`` is the planner's)."""
    return f"{name}={shellwords.quote(value)}"


def display(value: Any) -> str:
    """A flag value as the operator would type it (JSON for dicts, lower-case booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
