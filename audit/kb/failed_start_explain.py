"""Explain a failed vLLM start in the operator's terms, from vLLM's own checks.

:func:`explain` takes a failed start's error lines (oldest first, innermost exception last),
its argv and the installed vLLM version, and returns one :class:`Explanation`, always. In
order of preference:

1. **argparse** (vLLM exits before anything starts): ``unrecognized arguments: --x`` → the
   nearest spelling the release accepts (:func:`difflib.get_close_matches` over every
   spelling of its option table), or the replacement of a removed flag
   (:data:`audit.kb.flags_defaults.REMOVED_FLAGS`), or the release that added it;
   ``argument --x: invalid choice: 'v'`` → the valid values of the release's table.
2. **a raise site** (:mod:`audit.kb.raise_sites`) of the installed release, then of its
   neighbours: what vLLM checked (the guard, file:line), which of the operator's settings
   fed it (a flag the check reads that argv sets, or a flag whose value is in the message),
   and the change: a valid value (the release's choices, or the list the message gives), drop
   a forced backend/dtype/parser flag, or the release where the check changed.
3. **correlation** (kernel / driver errors raised outside vLLM's Python): any token of an
   error line equal to a value the operator set names that setting; the change drops it.
4. **named in the message**: a config name (``max_lora_rank``), a specific choice value
   of a forcing option (``bfloat16``) or a feature word (:data:`FEATURE_WORDS`: out of
   memory, pipeline parallel, LoRA…) names that option.
5. an exception line nothing above explains: said as vLLM's message, no setting.
6. **no exception line at all**: "cause not recognised", with the last error line.

The answer is a structured object (``as_dict``) the finding, the crash-loop alert, the host
page and the upgrade plan all show: setting, value, change, failing and fix commands.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from audit.kb import raise_sites as rs
from audit.kb.failed_start_architecture import architecture
from audit.kb.failed_start_argv import (
    Release,
    argv_known,
    command_text,
    edit_argv,
    flag_positions,
    launcher_word,
    public_version,
)
from audit.kb.failed_start_causes import (
    cuda_runtime_missing,
    driver_too_old,
    extension_missing,
    quant_capability,
    worker_forked_after_cuda,
)
from audit.kb.failed_start_devices import gpu_not_visible, nccl_failed
from audit.kb.failed_start_memory import memory_budget
from audit.kb.failed_start_ray import ray_cluster
from audit.kb.failed_start_spec import draft_vocab_mismatch
from audit.kb.failed_start_stages import no_kernel_for_gpu, wrapper_stage
from audit.kb.flags import parse_argv
from audit.kb.flags_defaults import REMOVED_FLAGS, SECRET_FLAGS
from audit.kb.platform_values import applicable, platform_bound
from audit.kb.vllm_tables import (
    acceptance,
    accepting_releases,
    dest_index,
    spelling_index,
    table,
    table_release,
)

#: Lines that wrap the real error: vLLM's engine/worker start wrappers ("Engine core
#: initialization failed. See root cause above.", "Worker failed with error …", "Engine process
#: failed to start") and the API server's RuntimeError re-raise. They are judged last.
WRAPPER = re.compile(r"root cause above|initialization failed|failed to start|"
                     r"Worker failed with error|Engine core proc", re.IGNORECASE)
#: Options whose value forces a choice vLLM would otherwise make itself: dropping one is the
#: change when a check rejects it (names from vLLM's ``vllm serve --help``).
FORCING = re.compile(r"backend|dtype|parser|quantization|^--device$|^--load-format$|"
                     r"^--tokenizer-mode$|impl$|^--compilation-config$|^--cpu-offload")
#: Values too common to name a setting by coincidence (correlation only).
_TRIVIAL = {"auto", "true", "false", "none", "0", "1", "", "-1", "vllm", "serve", "cuda"}
#: Error lines judged against the raise sites (the innermost first): enough for a
#: traceback's chain, bounded so a long log costs little.
MAX_CANDIDATES = 8
#: A log line's prefix (process, level, time, file:line) that differs between repeats.
_PREFIX = re.compile(r"^(?:\([^)]*\)\s*)?(?:\[rank\d+\]:?\s*)?(?:[A-Z]+\s+\d\d-\d\d\s+[\d:.]+"
                     r"\s+(?:\[?[\w./]+:\d+\]?)?\s*)?")
#: How alike a typo and a real option must be (difflib's ratio): ``--max-num-seqz`` /
#: ``--max-num-seqs`` is 0.92, ``--lora-path`` / ``--root-path`` 0.73 (not a typo).
_NEAR = 0.8
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)$")
_INVALID_CHOICE = re.compile(r"argument ([-\w/]+)(?:/[-\w]+)*: invalid choice: '([^']*)'"
                             r"(?: \(choose from (.*)\))?")
_ARGUMENT_ERROR = re.compile(r"argument ([-\w]+)(?:/[-\w]+)*: (.+)$")
_TOKEN = re.compile(r"[A-Za-z0-9_][\w.+/-]*[\w+]")


@dataclass
class Explanation:
    """One failed start, explained.

    ``kind``: unknown_flag | removed_flag | invalid_choice | bad_argument | raise_site |
    driver | installation | environment (the process environment vLLM was started in, e.g.
    its worker start method) | memory (no exception line, but vLLM's memory accounting in
    the log left nothing for the KV cache) | correlated | named_in_message | exception |
    unrecognised.
    ``setting``: the flag (``--kv-cache-dtype``), ``env:VLLM_X`` or ``hf:key`` that fed the
    check (None when none is known); ``value``: what the operator set; ``change``: one sentence;
    ``valid_values``: what the release accepts there; ``fix_argv``: the failing argv with
    the change applied (None when the change is not one argv edit)."""

    kind: str
    error_line: str | None
    summary: str
    checked: str | None = None
    setting: str | None = None
    value: Any = None
    change: str | None = None
    valid_values: list[str] = field(default_factory=list)
    release: str | None = None
    release_note: str | None = None
    site: dict[str, Any] | None = None
    changed_in: str | None = None
    failing_command: str | None = None
    fix_command: str | None = None
    fix_argv: list[str] | None = None
    #: True: ``setting`` is in the argv (any spelling) or the env; False: the argv is known
    #: and lacks it (vLLM's default applied, ``default``); None: the argv is unknown
    operator_set: bool | None = None
    default: Any = None
    #: "medium" when the explanation alone is not enough to name a cause (a registered
    #: architecture that failed to load); None otherwise
    confidence: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> Explanation:
        """The explanation kept in a finding's evidence (:meth:`as_dict`); keys this version
        does not know are ignored, missing ones take their defaults."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stored.items() if k in known},
                   **{k: None for k in ("kind", "error_line", "summary")
                      if k not in stored})

    @property
    def names_setting_and_change(self) -> bool:
        return bool(self.setting and self.change)


# ----------------------------------------------------------------------------- explain

def explain(lines: list[str], argv: list[str] | None, version: str | None, *,
            platform: str | None = None, cc: float | None = None,
            env: dict[str, str] | None = None,
            facts: dict[str, Any] | None = None) -> Explanation:
    """The explanation of one failed start (module docstring). Never raises on odd input.

    ``platform``: cuda | rocm | cpu | xpu | tpu or None (unknown); ``cc``: the GPU's compute
    capability (8.9) or None: the values offered are those that apply there
    (:mod:`audit.kb.platform_values`). ``env``: the server's environment when known (a
    variable in it is the operator's setting). ``facts``: the host and model facts of the
    report (:func:`audit.kb.failed_start_facts.facts_of`: driver, GPU memory, weights, the
    checkpoint's quantization); platform and capability default to theirs."""
    facts = facts or {}
    platform = platform or facts.get("platform")
    cc = cc if cc is not None else facts.get("cc")
    argv = [str(t) for t in argv or []]
    lines = unwrap(lines)
    table_rel, note = table_release(version)
    release = Release(table_rel, version)
    where = (platform, cc)
    out = _argparse(lines, argv, release, where) or _driver(lines, facts) \
        or _installation(lines, version, facts) or _environment(lines, env, version, facts, argv) \
        or _architecture(lines, argv, release) \
        or _sites(lines, argv, version, where)
    # an installation problem is the cause whatever words of the error match a setting
    if out is None or (out.setting is None and out.kind not in ("installation", "environment")):
        # a check that reads no setting (a GPU capability, a weight shape): the error's own
        # words may still name one; the check found stays what vLLM checked
        named = _correlate(lines, argv, release) or \
            _mentioned(lines, argv, release, where) or _feature(lines, argv, release)
        if out is not None and named is not None:
            named.kind, named.checked, named.site = out.kind, out.checked, out.site
            named.changed_in = named.changed_in or out.changed_in
        out = named or out or _bare(lines)
    _refine(out, lines, version, release, facts, cc)
    _stage(out, lines, facts)
    out.release = str(out.release or release)
    out.release_note = out.release_note or note
    _whose(out, argv, release, env)
    out.failing_command = command_text(argv)
    out.fix_command = command_text(out.fix_argv)
    return out


def _driver(lines: list[str], facts: dict[str, Any]) -> Explanation | None:
    """A driver older than the wheels' CUDA: the GPU is unusable, whatever else the log says
    (:func:`audit.kb.failed_start_causes.driver_too_old`)."""
    found = driver_too_old(lines, facts)
    return Explanation(**found) if found else None


def _installation(lines: list[str], version: str | None,
                  facts: dict[str, Any]) -> Explanation | None:
    """vLLM's compiled extension missing or built for another PyTorch/CUDA, or the CUDA
    runtime the wheels were built for absent, or a build without kernels for the GPU: the
    installation, not a setting (:func:`audit.kb.failed_start_causes.extension_missing`,
    ``cuda_runtime_missing``; :func:`audit.kb.failed_start_stages.no_kernel_for_gpu`)."""
    found = extension_missing(lines, version) or cuda_runtime_missing(lines, facts) \
        or no_kernel_for_gpu(lines, facts, version)
    return Explanation(**found) if found else None


def _stage(out: Explanation, lines: list[str], facts: dict[str, Any]) -> None:
    """Nothing named the cause and the excerpt's error is only vLLM's start-up wrapper: say
    which stage failed and where the real error is (:func:`audit.kb.failed_start_stages.
    wrapper_stage`). A non-wrapper exception the excerpt quotes keeps its own summary."""
    if out.kind not in ("exception", "unrecognised") or out.change is not None:
        return
    if out.kind == "exception" and not WRAPPER.search(out.error_line or ""):
        return
    found = wrapper_stage(lines, facts)
    if found:
        for key, value in found.items():
            setattr(out, key, value)


def _environment(lines: list[str], env: dict[str, str] | None, version: str | None,
                 facts: dict[str, Any], argv: list[str]) -> Explanation | None:
    """Workers forked after CUDA was initialised: the worker start method
    (:func:`audit.kb.failed_start_causes.worker_forked_after_cuda`); a process that saw no
    GPU, or not the one CUDA_VISIBLE_DEVICES named, NCCL failing to link the workers' GPUs
    (:mod:`audit.kb.failed_start_devices`), and Ray's placement (:mod:`.failed_start_ray`)."""
    found = worker_forked_after_cuda(lines, env, version) or gpu_not_visible(lines, env, facts) \
        or nccl_failed(lines) or ray_cluster(lines, argv, env)
    return Explanation(**found) if found else None


def _refine(out: Explanation, lines: list[str], version: str | None, release: Release,
            facts: dict[str, Any], cc: float | None) -> None:
    """The cause behind a check the raise site names, from the report's facts: a
    quantization method's minimum capability by release, the weights against the memory
    budget (:mod:`audit.kb.failed_start_causes`, :mod:`audit.kb.failed_start_memory`)."""
    found = quant_capability(lines, facts, version, f"{release:run}", cc)
    if found:
        if not found.pop("drop_fix"):
            out.fix_argv = None  # the checkpoint's own method: dropping the flag cannot help
        for key, value in found.items():
            setattr(out, key, value)
        return
    budget = memory_budget(lines, facts, _default(release, "--gpu-memory-utilization"))
    if budget:
        prefix = budget.pop("summary_prefix", None)
        line = budget.pop("error_line", None)
        for key, value in budget.items():
            setattr(out, key, value)
        if prefix and out.kind == "unrecognised":
            # no exception line: vLLM's own memory accounting in the log is the cause
            out.kind, out.error_line = "memory", line
            out.summary = prefix
        elif prefix:
            out.summary = f"{prefix}; vLLM stopped: {(line or out.error_line or '').strip()}"
        elif out.kind in ("exception", "unrecognised"):
            # the memory check's own words name the setting: no longer "nothing explains it"
            out.kind = "named_in_message"
            out.summary = f"vLLM stopped: {(line or out.error_line or '').strip()[:300]}"
        out.fix_argv = None


def _whose(out: Explanation, argv: list[str], release: str,
           env: dict[str, str] | None) -> None:
    """Whether the operator set ``out.setting`` (argv in any spelling the release accepts, or
    env), and vLLM's default when the known argv lacks it."""
    if not out.setting:
        return
    if out.setting.startswith("env:"):
        # the env known may be an older start's: it proves a variable set, never one unset
        out.operator_set = True if env and out.setting[4:] in env else None
        return
    if not out.setting.startswith("--"):
        return
    if out.setting in _settings(argv, release) or flag_positions(argv, {out.setting}):
        out.operator_set = True
    elif argv_known(argv):
        out.operator_set = False
        out.default = _default(release, out.setting)


def _default(release: str, flag: str) -> Any:
    """vLLM's default of ``flag`` in ``release``'s table (None when not stated)."""
    entry = spelling_index(release).get(flag)
    if entry is None:
        return None
    found = table(release)["options"][entry.flag].get("default")
    return None if found is None or str(found).startswith("<expr") else found


def _left(flag: str, release: str) -> str:
    """"vLLM's default (value)" for a flag the operator left unset."""
    found = _default(release, flag)
    return "vLLM's default" + (f" ({found})" if found is not None else "")


_WRAPPED = re.compile(r"failed with error '(.+?)'(?:,|\s*$)|"
                      r"Exception in worker \S+ while processing method \w+: (.+)$")


def unwrap(lines: list[str]) -> list[str]:
    """Lines with the error a wrapper quotes (``Worker failed with error '<inner>'``, V0's
    ``Exception in worker … while processing method m: <inner>``) added after the wrapper,
    so the inner error is judged as vLLM's own line."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        inner = _WRAPPED.search(line)
        if inner:
            out.append(inner[1] or inner[2])
    return out


def _settings(argv: list[str], release: str) -> dict[str, tuple[str, Any]]:
    """Flags the operator set -> (spelling as written, value); secrets never carry a value."""
    parsed = parse_argv(argv, release)
    found: dict[str, tuple[str, Any]] = {}
    for use in parsed.used:
        dest = use.get("dest")
        value = parsed.values.get(dest) if dest else None
        found[use["flag"]] = (use["spelling"], None if dest in SECRET_FLAGS else value)
    if parsed.values.get("model") and "--model" not in found:
        found["--model"] = ("--model", parsed.values["model"])
    return found


def _argparse(lines: list[str], argv: list[str], release: str,
              where: tuple) -> Explanation | None:
    for line in reversed(lines):
        found = rs.exception_of(line)
        if found is None or found[0] != "SystemExit":
            continue
        message = found[1]
        unknown = _UNRECOGNIZED.search(message)
        if unknown:
            return _unknown_flag(line, unknown[1].split()[0], argv, release)
        choice = _INVALID_CHOICE.search(message)
        if choice:
            return _invalid_choice(line, choice[1], choice[2], choice[3], argv, release,
                                   where)
        other = _ARGUMENT_ERROR.search(message)
        if other:
            return Explanation(
                kind="bad_argument", error_line=line, setting=other[1],
                value=_settings(argv, release).get(other[1], (None, None))[1],
                checked="vLLM's argument parser (argparse) read the value",
                change=f"give {other[1]} a value vLLM {release:run} accepts ({other[2]})",
                summary=f"vLLM {release:run} refused {other[1]}: {other[2]}")
    return None


def _unknown_flag(line: str, spelling: str, argv: list[str], release: str) -> Explanation:
    name = spelling.split("=", 1)[0]
    if not name.startswith("-"):
        return _positional(line, name, argv, release)
    why = acceptance(name, release) or {"reason": "never"}
    spellings = [s for s in spelling_index(release) if s.startswith("--")]
    near = difflib.get_close_matches(name, spellings, n=1, cutoff=_NEAR)
    base = dict(error_line=line, setting=name, value=None, release=release,
                checked=f"vLLM {release:run}'s argument parser: the option is not in its table")
    advice = {"--" + k.replace("_", "-"): (removed, r) for k, removed, r, _ in REMOVED_FLAGS}
    if name in advice or why["reason"] == "removed":
        removed_in, replacement = advice.get(name, (why.get("removed_in"), None))
        last = f" (last accepted by {why['last_accepted']})" if why.get("last_accepted") else ""
        change = (f"{name} was removed in vLLM {removed_in}{last}: " +
                  (f"use {replacement}" if replacement else "drop it" +
                   (f" (nearest option now: {near[0]})" if near else "")))
        return Explanation(kind="removed_flag", summary=f"vLLM {release:run} no longer accepts "
                           f"{name}", change=change, changed_in=removed_in,
                           fix_argv=edit_argv(argv, release, name, drop=True), **base)
    if why["reason"] == "never" and name in spelling_index(release):
        first = accepting_releases(name)[0]
        return Explanation(kind="unknown_flag", summary=f"the vLLM that ran refuses {name}, "
                           f"which vLLM {release:run} (judged here) accepts: the installed build "
                           f"is likely not {release} as reported", changed_in=first,
                           change=f"drop {name}, or install a vLLM that accepts it (from "
                                  f"{first})",
                           fix_argv=edit_argv(argv, release, name, drop=True), **base)
    if why["reason"] == "added_later":
        return Explanation(kind="unknown_flag", summary=f"{name} needs vLLM "
                           f"{why['added_in']} or newer; {release:run} is installed",
                           change=f"upgrade to vLLM {why['added_in']} or drop {name}",
                           changed_in=why["added_in"],
                           fix_argv=edit_argv(argv, release, name, drop=True), **base)
    if near:
        return Explanation(kind="unknown_flag", summary=f"vLLM {release:run} has no option {name}; "
                           f"did you mean {near[0]}?", change=f"spell it {near[0]}",
                           valid_values=[near[0]],
                           fix_argv=_rename(argv, name, near[0]), **base)
    return Explanation(kind="unknown_flag", summary=f"vLLM {release:run} has no option {name}",
                       change=f"drop {name} (no option of vLLM {release:run} is close to it)",
                       fix_argv=_rename(argv, name, None), **base)


def _positional(line: str, word: str, argv: list[str], release: str) -> Explanation:
    """A word the launcher did not take (:func:`audit.kb.failed_start_argv.launcher_word`)."""
    return Explanation(kind="unknown_flag", error_line=line, release=release,
                       checked=f"vLLM {release:run}'s argument parser: the launcher takes no "
                               "positional words", **launcher_word(line, word, argv))


def _rename(argv: list[str], name: str, new: str | None) -> list[str] | None:
    """An unknown option renamed (its value kept) or dropped with the value after it."""
    out = list(argv)
    for index, token in enumerate(out):
        head, eq, rest = token.partition("=")
        if head != name:
            continue
        if new is not None:
            out[index] = new + (eq + rest if eq else "")
        else:
            nxt = index + 1
            width = 1 if eq or nxt >= len(out) or out[nxt].startswith("-") else 2
            del out[index:index + width]
        return out
    return None


def _choices(release: str, flag: str) -> list[str]:
    entry = spelling_index(release).get(flag)
    if entry is None:
        return []
    choices = table(release)["options"][entry.flag].get("choices")
    if not isinstance(choices, list):  # "<expr: …>": computed at run time (a registry)
        return []
    return [str(c) for c in choices if c not in (None, "None") and not str(c).startswith("<expr")]


def _on_platform(release: str, flag: str, valid: list[str], where: tuple,
                 value: Any) -> tuple[list[str], list[str]]:
    """(values to offer, the nearest to ``value`` to pick): a platform-bound option's values
    are those that apply on the server's platform/GPU; with the platform unknown they are
    all listed and none is picked (:mod:`audit.kb.platform_values`)."""
    if not platform_bound(flag):
        return valid, difflib.get_close_matches(str(value), valid, n=1, cutoff=0.5)
    try:
        kept = applicable(release, flag, valid, *where)
    except FileNotFoundError:
        kept = None
    if kept is None:
        return valid, []
    return kept, difflib.get_close_matches(str(value), kept, n=1, cutoff=0.5)


def _invalid_choice(line: str, flag: str, value: str, listed: str | None, argv: list[str],
                    release: str, where: tuple) -> Explanation:
    valid = _choices(release, flag) or re.findall(r"'([^']*)'", listed or "")
    valid, near = _on_platform(release, flag, valid, where, value)
    fix = edit_argv(argv, release, flag, new_value=near[0]) if near else \
        edit_argv(argv, release, flag, drop=True)
    shown = ", ".join(valid[:40]) + (" …" if len(valid) > 40 else "")
    return Explanation(
        kind="invalid_choice", error_line=line, setting=flag, value=value, valid_values=valid,
        release=release, checked=f"vLLM {release:run}'s argument parser: {flag} takes one of "
        "its choices", summary=f"vLLM {release:run} does not accept {flag} {value}",
        change=(f"set {flag} to one of: {shown}" + (f" (nearest: {near[0]})" if near else
                                                     "; or drop it for the default")),
        fix_argv=fix)


def _candidates(lines: list[str]) -> list[tuple[int, str]]:
    """Exception lines, innermost (last) first, wrappers after the rest; every line when
    none names an exception (a report that quotes only vLLM's message)."""
    found = [(i, line) for i, line in enumerate(lines) if rs.exception_of(line)] or \
        list(enumerate(lines))
    found.reverse()
    seen: set[str] = set()  # a crash loop's log repeats the same error: judge it once
    found = [(i, line) for i, line in found
             if not (_PREFIX.sub("", line) in seen or seen.add(_PREFIX.sub("", line)))]
    found = found[:MAX_CANDIDATES]
    return [c for c in found if not WRAPPER.search(c[1])] + \
        [c for c in found if WRAPPER.search(c[1])]


def _sites(lines: list[str], argv: list[str], version: str | None,
           where: tuple) -> Explanation | None:
    """The best raise-site match over every exception line and the nearest releases: one
    that names a setting of the operator wins; else the innermost non-wrapper match."""
    if public_version(version) is None:
        version = None  # an unparseable version ("latest", free text) is an unknown one
    order = rs.nearest(version)
    best: tuple[tuple, rs.LineMatch, str] | None = None
    for rank, (_index, line) in enumerate(_candidates(lines)):
        for distance, release in enumerate(order if version is None else order[:5]):
            hit = rs.match_line(line, release)
            if hit is None:
                continue
            only = _platform_only(hit.site)
            if only and where[0] is not None and where[0] != only:
                continue  # a ROCm-only (CPU-only…) check never ran on another host
            foreign = only is not None and where[0] is None
            settings = _settings(argv, release)
            named = _named(hit, settings)
            # a wrapper ("Worker failed with error …") never beats the error it wraps; a much
            # longer match (16+ characters more of vLLM's text) beats a nearer release
            wrapper = bool(WRAPPER.search(line))
            # with the platform unknown, a check every platform runs beats a one-platform one
            score = (not wrapper, not foreign,
                     named is not None and not wrapper, hit.site.literal // 16,
                     -distance, -rank, hit.site.literal)
            if best is None or score > best[0]:
                best = (score, hit, release)
            if version is not None:
                break
    if best is None or not best[0][0]:
        return None  # a wrapper alone says nothing of the cause: the later steps judge it
    _score, hit, release = best
    out = _from_site(hit, argv, Release(release, version), order[0], where)
    only = _platform_only(hit.site)
    if only and where[0] is None:
        # only a one-platform check has these words and the host's platform is unknown: the
        # check may not be the one that ran, so no release advice rests on it
        out.release_note = (f"the only matching check is {only}-only code; the host's "
                            "platform is not reported")
        if out.changed_in and out.change and out.change.startswith("run vLLM"):
            out.change = None
        out.changed_in = None
    return out


#: Source paths of code only one platform runs: ROCm (``platforms/rocm.py``,
#: ``rocm_aiter_*`` backends) and the CPU, XPU and TPU backends.
_PLATFORM_PATHS = (("rocm", re.compile(r"(?:^|/)rocm|rocm_|_rocm|aiter", re.IGNORECASE)),
                   ("cpu", re.compile(r"(?:^|/)cpu_|_cpu\.py|/cpu/", re.IGNORECASE)),
                   ("xpu", re.compile(r"(?:^|/)xpu|_xpu\.py", re.IGNORECASE)),
                   ("tpu", re.compile(r"(?:^|/)tpu|_tpu\.py|pallas", re.IGNORECASE)))


def _platform_only(site: rs.Site) -> str | None:
    """The one platform whose code holds this raise site; None for common code."""
    return next((name for name, pattern in _PLATFORM_PATHS if pattern.search(site.at or "")),
                None)


#: Names in a guard that stand for a setting although no config field is read: vLLM
#: divides weights and heads by the tensor-parallel size (``*_per_partition``,
#: ``get_tensor_model_parallel_world_size()``) and stages by the pipeline-parallel size.
_GUARD_SETTINGS = (
    (re.compile(r"tensor_model_parallel_world_size|\btp_size\b|_per_partition\b|"
                r"tensor_parallel_size"), "--tensor-parallel-size"),
    (re.compile(r"pipeline_model_parallel_world_size|\bpp_size\b|pipeline_parallel_size"),
     "--pipeline-parallel-size"),
)


def reads(site: rs.Site) -> list[str]:
    """The settings a site reads (extracted) and those its guard implies (above)."""
    found = list(site.reads)
    for pattern, flag in _GUARD_SETTINGS:
        if site.guard and pattern.search(site.guard) and flag not in found:
            found.append(flag)
    return found


def _named(hit: rs.LineMatch, settings: dict[str, tuple[str, Any]]) -> tuple | None:
    """(flag, value) of the operator that fed the check, best first: a flag the check reads
    whose value is in the message; a flag whose value is in the message; a flag the check
    reads with a non-boolean value; any flag the check reads."""
    values = {str(v).strip("'\"` ").lower() for v in hit.values if v}
    read = [(f, settings[f][1]) for f in reads(hit.site) if f in settings]
    shown = [(f, v) for f, (_s, v) in settings.items() if v is not None and f != "--model"
             and str(v).lower() not in _TRIVIAL and (str(v).lower() in values or (
                 len(str(v)) > 2 and any(str(v).lower() in x for x in values)))]
    for group in ([x for x in read if x in shown], shown,
                  [x for x in read if not isinstance(x[1], bool)], read):
        if group:
            return group[0]
    return None


def _from_site(hit: rs.LineMatch, argv: list[str], release: str,
               installed: str, where: tuple) -> Explanation:
    site = hit.site
    settings = _settings(argv, release)
    named = _named(hit, settings)
    changed = rs.changed_in(site)
    checked = (f"{site.function} ({site.at}, vLLM {site.release})" +
               (f" checks `{site.guard}`" if site.guard else ""))
    note = None if site.release == installed else \
        (f"matched in vLLM {site.release}'s source; the installed {installed}'s message "
         "differs")
    base = dict(kind="raise_site", error_line=hit.line, checked=checked, release=release,
                release_note=note, site=rs.as_dict(site), changed_in=changed)
    message = f"{hit.exc}: {hit.message}"[:300]
    if named is None:
        flags = [r for r in reads(site) if r.startswith("--")]
        other = [r for r in reads(site) if not r.startswith("--")]
        setting = (flags or other or [None])[0]
        change = _unset_change(setting, flags, other, changed, release, argv_known(argv),
                               site.guard)
        return Explanation(summary=f"vLLM {release:run} stopped the start: {message}",
                           setting=setting, change=change, **base)
    flag, value = named
    valid = _listed_values(hit) or _choices(release, flag)
    valid = [v for v in valid if v != str(value)]
    spelling = settings[flag][0]
    valid, near = _on_platform(release, flag, valid, where, value)
    if valid and (near or not FORCING.search(flag) or "parser" in flag):
        # a parser is needed by the options around it: pick a valid one, never drop it
        change = f"set {flag} to one of: {', '.join(valid[:30])}" + (
            f" (nearest: {near[0]})" if near else "")
        fix = edit_argv(argv, release, spelling, new_value=near[0]) if near else None
    elif FORCING.search(flag):
        change = f"drop {flag} {value} and let vLLM choose" + (
            f", or set one of: {', '.join(valid[:30])}" if valid else "")
        fix = edit_argv(argv, release, spelling, drop=True)
    else:
        change = f"change {flag}{_now(value)}: vLLM checks `{site.guard or site.at}`"
        fix = None
    if changed:
        change += f"; vLLM {changed} no longer has this check"
    shown = "" if value is None else f" {value}"
    return Explanation(summary=f"vLLM {release:run} rejected {flag}{shown}: {message}",
                       setting=flag, value=value, change=change, valid_values=valid,
                       fix_argv=fix, **base)


def _now(value: Any) -> str:
    """" (now V)" for a value the argv gives; nothing when it is unknown (a placeholder)."""
    return "" if value is None else f" (now {value})"


def _listed_values(hit: rs.LineMatch) -> list[str]:
    """The valid values a message lists itself (``(chose from { a,b })``, ``one of [a, b]``)."""
    for expr, value in zip(hit.site.holes, hit.values, strict=False):
        if value and re.search(r"join|valid|choices|supported|keys\(\)|list_registered", expr):
            found = [v.strip(" '\"[]{}") for v in re.split(r"[,|]", value)
                     if v.strip(" '\"[]{}")]
            return found[:-1] if hit.truncated else found  # the last one may be cut
    return []


def _unset_change(setting: str | None, flags: list[str], other: list[str],
                  changed: str | None, release: str, known_argv: bool,
                  guard: str | None) -> str | None:
    later = f"; vLLM {changed} no longer has this check" if changed else ""
    if setting is None:
        return f"run vLLM {changed} or newer, where this check is gone" if changed else None
    check = f" (vLLM checks `{guard}`)" if guard else ""
    if flags and not known_argv:
        return f"change {' or '.join(flags[:3])} so that the check passes{check}{later}"
    if flags:
        left = "; ".join(f"{f} is at {_left(f, release)}" for f in flags[:3])
        return (f"{left}: the check fails with it{check}; change it only if the default is "
                f"what fails for this model and GPU{later}")
    if setting.startswith("env:"):
        return f"change or unset the environment variable {setting[4:]}{check}{later}"
    return (f"the model's config key {setting[3:]} fails this check{check}: serve a "
            f"checkpoint whose config passes it, or override the key (--hf-overrides){later}")


def _correlate(lines: list[str], argv: list[str], release: str) -> Explanation | None:
    """A value the operator set that an error line (innermost first) names verbatim."""
    settings = _settings(argv, release)
    values = {str(v).lower(): (flag, v) for flag, (_s, v) in settings.items()
              if v is not None and not isinstance(v, (dict, list)) and flag != "--model"
              and str(v).lower() not in _TRIVIAL}
    for line in reversed([line for line in lines if rs.exception_of(line)] or lines):
        tokens = {t.lower() for t in _TOKEN.findall(line)}
        for text, (flag, value) in values.items():
            if text in tokens:
                spelling = settings[flag][0]
                forcing = bool(FORCING.search(flag))
                change = (f"drop {flag} {value} and let vLLM choose" if forcing else
                          f"change {flag} (now {value})")
                return Explanation(
                    kind="correlated", error_line=line, setting=flag, value=value,
                    change=change, summary=f"the error names {value}, the value of your "
                    f"{flag}", checked="no check of vLLM's Python source raised this "
                    "(a kernel, driver or library error); your setting appears in it",
                    fix_argv=edit_argv(argv, release, spelling, drop=True) if forcing
                    else None)
    return None


def _specific(value: str) -> bool:
    """A choice value that names one thing (``bfloat16``, ``fp8_e5m2``), not a word that
    any message may contain (``auto``, ``error``, ``model``)."""
    return len(value) > 2 and bool(re.search(r"\d|_", value)) and \
        value.lower() not in _TRIVIAL


def _architecture(lines: list[str], argv: list[str], release: str) -> Explanation | None:
    """The model registry's refusal (:mod:`audit.kb.failed_start_architecture`), or a draft
    model whose vocabulary size differs from the target's (:mod:`.failed_start_spec`)."""
    model = _settings(argv, release).get("--model", (None, None))[1]
    found = architecture(lines, release, getattr(release, "running", None), model) \
        or draft_vocab_mismatch(lines, argv)
    return Explanation(**found) if found else None


#: Words of an error that name a feature, and the option that turns it on or sizes it
#: (option names from ``vllm serve --help``); an out-of-memory error at start-up is sized by
#: the memory vLLM claims (vLLM's docs, "Conserving memory": lower
#: ``--gpu-memory-utilization``, ``--max-model-len``, ``--max-num-seqs``).
FEATURE_WORDS = (
    (re.compile(r"out of memory|OutOfMemory", re.I), "--gpu-memory-utilization"),
    (re.compile(r"pipeline[ -]parallel", re.I), "--pipeline-parallel-size"),
    (re.compile(r"tensor[ -]parallel", re.I), "--tensor-parallel-size"),
    (re.compile(r"speculative decoding|\bspeculat", re.I), "--speculative-config"),
    (re.compile(r"\bLoRA\b"), "--enable-lora"),
    (re.compile(r"prefix caching", re.I), "--enable-prefix-caching"),
    (re.compile(r"chunked prefill", re.I), "--enable-chunked-prefill"),
    (re.compile(r"BitsAndBytes", re.I), "--quantization"),
)


def _feature(lines: list[str], argv: list[str], release: str) -> Explanation | None:
    """An error that names a feature (:data:`FEATURE_WORDS`): the option behind it."""
    settings = _settings(argv, release)
    flags = set(dest_index(release).values())
    for _index, line in _candidates(lines):
        for pattern, flag in FEATURE_WORDS:
            if not pattern.search(line) or flag not in flags:
                continue
            value = settings.get(flag, (None, None))[1]
            change = (f"change {flag} (now {value})" if flag in settings else
                      f"{flag} is at {_left(flag, release)}; change it if it sizes what "
                      "failed" if argv_known(argv) else f"change {flag}")
            if flag == "--gpu-memory-utilization":
                change = ("lower --gpu-memory-utilization" + (f" (now {value})" if value
                                                               is not None else "")
                          + ", --max-model-len or --max-num-seqs, or free the GPU of other "
                          "processes")
            return Explanation(
                kind="named_in_message", error_line=line, setting=flag, value=value,
                change=change, checked=f"the error names a feature of {flag} (no check of "
                f"vLLM {release:run} matched)", summary=f"vLLM stopped: {line.strip()[:300]}")
    return None


def _mentioned(lines: list[str], argv: list[str], release: str,
               where: tuple = (None, None)) -> Explanation | None:
    """An exception line that names a setting by its config name (``max_lora_rank``,
    ``gpu_memory_utilization``): that setting, changed."""
    dests = dest_index(release)
    settings = _settings(argv, release)
    for _index, line in _candidates(lines):
        for word in re.findall(r"`?([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`?", line):
            flag = dests.get(word)
            if flag is None:
                continue
            value = settings.get(flag, (None, None))[1]
            return Explanation(
                kind="named_in_message", error_line=line, setting=flag, value=value,
                checked=f"vLLM's message names {word} (no check of vLLM {release:run} matched)",
                change=(f"change {flag}{_now(value)}" if flag in settings else
                        f"{flag} is at {_left(flag, release)}; change it if the message "
                        "means its value" if argv_known(argv) else
                        f"change {flag} (vLLM's message names it)"),
                summary=f"vLLM stopped on {word}: {line.strip()[:300]}")
    for _index, line in _candidates(lines):
        tokens = {t.lower() for t in _TOKEN.findall(line)}
        for flag, option in table(release)["options"].items():
            named = [str(c) for c in option.get("choices") or [] if _specific(str(c))
                     and str(c).lower() in tokens and c != option["default"]]
            if named and FORCING.search(flag):
                mine = flag in settings
                value = settings[flag][1] if mine else None
                others = [str(c) for c in option["choices"] if str(c) not in named]
                others, _near = _on_platform(release, flag, others, where, named[0])
                shown = ", ".join(others[:20])
                change = (f"set {flag} to another of its values: {shown}" if mine else
                          f"{flag} is at {_left(flag, release)}, so vLLM or the model's "
                          f"config chose {named[0]}; values of {flag} that apply here: "
                          f"{shown}" if argv_known(argv) else
                          f"vLLM's message names {named[0]}, a value of {flag}; its values "
                          f"that apply here: {shown}")
                return Explanation(
                    kind="named_in_message", error_line=line, setting=flag, value=value,
                    valid_values=others, checked=f"vLLM's message names {named[0]}, a value "
                    f"of {flag} (no check of vLLM {release:run} matched)",
                    change=change,
                    summary=f"vLLM stopped on {named[0]} ({flag}): {line.strip()[:300]}")
    return None


def _bare(lines: list[str]) -> Explanation:
    exceptional = [line for line in lines if rs.exception_of(line)]
    if exceptional:
        line = next((x for x in reversed(exceptional) if not WRAPPER.search(x)),
                    exceptional[-1])
        return Explanation(kind="exception", error_line=line,
                           summary=f"vLLM stopped with \"{line.strip()[:300]}\"; no check of "
                           "vLLM and none of your settings explain it")
    last = lines[-1] if lines else None
    return Explanation(kind="unrecognised", error_line=last,
                       summary="cause not recognised: the log has no exception line; last "
                       f"error line: \"{(last or 'none captured').strip()[:300]}\"")
