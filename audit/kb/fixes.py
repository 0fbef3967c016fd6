"""Bug fixes a server's release lacks, for what the server actually runs.

Index: ``data/vllm_fixes.json`` of the active KB (shipped, and in the signed bundle)::

    {"format": 1, "fixes": [{"number": 24709, "title": "...", "url": "...", "date": "2025-09-12",
                "date_kind": "opened" | "seen unmerged", "source": "...",
                "features": {"arch": [...], "attention": [...], "quant": [...],
                             "kv": [...], "moe": [...], "parser": [...], "spec": [...],
                             "flags": [...], "gpu": [...], "platform": [...]}}]}

``date`` is the earliest the fix can have merged (the PR's opening date, or a later day the
thread shows it still unmerged); ``first_release`` (:func:`first_release`) is the first
known release built after that day (``provenance.built`` of the capability tables: the
wheel's build day), so a server on an older release lacks the fix for
certain, and the named release is the first that *can* carry it (the live path,
:mod:`audit.kb.fixes_live`, refines it with GitHub's ``merged_at``).

Matching (precision over recall, :func:`touches`): a fix touches a server only through
specific features. Every *scope* (``arch``, ``gpu``, ``platform``) and every *subject*
(``attention``, ``quant``, ``kv``, ``moe``, ``parser``, ``spec``, ``flags``) the fix names
must be the server's; a fix tagged with scopes only matches on ``arch`` (a model fix),
never on a GPU or platform alone.

:func:`tag` derives the tags from a PR title and changed file paths with the vocabulary of
the capability tables (backend names and modules, quantization methods, parser names,
architectures, speculative methods): the same tagging for the shipped index and the live
path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from packaging.version import Version

from audit.kb.paths import load_data, per_kb
from audit.kb.release_caps import caps
from audit.kb.support import backend_problems
from audit.kb.vllm_tables import releases, table

SUBJECTS = ("attention", "quant", "kv", "moe", "parser", "spec", "flags")
SCOPES = ("arch", "gpu", "platform")
#: GPU words in PR titles -> the capability class vLLM's own checks use (sm<major><minor>)
#: or the platform; "non-sm100" style negations are dropped before matching.
_GPU_WORDS = {"sm120": "sm120", "sm121": "sm120", "sm100": "sm100", "sm90": "sm90",
              "sm89": "sm89", "sm80": "sm80", "sm70": "sm70", "sm75": "sm75",
              "b200": "sm100", "h100": "sm90", "h200": "sm90", "a100": "sm80",
              "rtx blackwell": "sm120", "hopper": "sm90", "ampere": "sm80", "volta": "sm70"}
_PLATFORM_WORDS = {"rocm": "rocm", "aiter": "rocm", "mi300": "rocm", "mi355": "rocm",
                   "cpu backend": "cpu", "[cpu]": "cpu", "xpu": "xpu", "tpu": "tpu"}
#: Flags a title can name by their own spelling (dest form) or a fixed phrase.
_FLAG_WORDS = {" pp": "pipeline_parallel_size", "pipeline parallel": "pipeline_parallel_size",
               "prefix caching": "enable_prefix_caching", "dpa": "data_parallel_size",
               "data parallel": "data_parallel_size", "expert parallel": "enable_expert_parallel",
               "chunked prefill": "enable_chunked_prefill"}


def _parse(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def index() -> dict[str, Any]:
    """The shipped index (FileNotFoundError naming the file when absent)."""
    return load_data("vllm_fixes.json", _parse)


@per_kb
def release_dates() -> dict[str, str]:
    """Known release -> the day its wheel was built (capability table provenance)."""
    return {r: caps(r)["provenance"]["built"] for r in releases()
            if caps(r)["provenance"].get("built")}


def first_release(date: str, dates: dict[str, str] | None = None) -> str | None:
    """First known release built after ``date`` (ISO day); None when none is yet."""
    dates = dates if dates is not None else release_dates()
    later = [r for r, d in dates.items() if d > date]
    return min(later, key=Version) if later else None


@per_kb
def dated_fixes() -> tuple[tuple[dict[str, Any], str, Version], ...]:
    """(fix, first release, its Version) for every indexed fix some known release has."""
    dates = release_dates()
    out = []
    for fix in index()["fixes"]:
        first = first_release(fix["date"], dates)
        if first is not None:
            out.append((fix, first, Version(first)))
    return tuple(out)


# --------------------------------------------------------------------------- tagging

def _words(text: str) -> str:
    """Lower-case text with CamelCase split and separators as spaces, padded."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", " ", text)  # FlashInfer, not MoE
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()) + " "


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@per_kb
def vocabulary() -> dict[str, dict[str, str]]:
    """{category: {squashed spelling: canonical name}} from the newest capability table and
    every release's speculative methods."""
    newest = caps(releases()[-1])
    vocab: dict[str, dict[str, Any]] = {k: {} for k in ("attention", "quant", "parser",
                                                         "arch", "spec", "modules", "moe")}
    for name, spec in newest["attention_backends"].items():
        vocab["attention"][_squash(name)] = name
        vocab["modules"][spec.get("module") or ""] = name
    for alias, name in (("flashinfer", "FLASHINFER"), ("flashattention", "FLASH_ATTN"),
                        ("tritonattention", "TRITON_ATTN"), ("aitermla", "ROCM_AITER_MLA")):
        vocab["attention"][alias] = name  # how titles spell the enum names
    for name in newest["quantization_methods"] + list(newest["quantization"]):
        vocab["quant"][_squash(name)] = name
    vocab["quant"].update({"ct": "compressed-tensors", "nvfp4": "modelopt_fp4"})
    for name in newest["tool_parsers"] + newest["reasoning_parsers"]:
        vocab["parser"][_squash(name)] = name
    for arch in newest["architectures"]:
        key = _squash(re.sub(r"(ForCausalLM|ForConditionalGeneration|Model)$", "", arch))
        if len(key) >= 5:
            vocab["arch"].setdefault(key, []).append(arch)
    for release in releases():
        for method in table(release)["speculative"]["methods"]:
            vocab["spec"][_squash(method)] = method
        for choice in (table(release)["options"].get("--moe-backend") or {}).get(
                "choices") or []:
            if choice != "auto":
                vocab["moe"][_squash(choice)] = choice
    return vocab


def _grams(words: list[str], size: int = 4) -> set[str]:
    return {"".join(words[i:i + n]) for n in range(1, size + 1)
            for i in range(len(words) - n + 1)}


def tag(title: str, files: list[str] | None = None) -> dict[str, list[str]]:
    """Feature tags of one PR (module docstring), each list sorted."""
    vocab, text = vocabulary(), _words(title)
    text = re.sub(r" non sm ?\d+", " ", text)  # "non-sm100 GPUs": not a GPU scope
    grams = _grams(text.split())
    out: dict[str, set[str]] = {k: set() for k in SUBJECTS + SCOPES}
    kv = " kv" in text
    for category in ("attention", "spec", "moe"):
        out[category] |= {name for key, name in vocab[category].items() if key in grams}
    if " moe " in text and out["moe"]:  # "FlashInfer CUTLASS MoE": the MoE kernel
        out["attention"] -= {"FLASHINFER"}
    elif " moe " not in text:
        out["moe"] = set()
    if " parser" in text:  # a parser fix: the model name in it names the parser
        keys = [k for k in vocab["parser"] if k in grams]
        out["parser"] |= {vocab["parser"][k] for k in keys
                          if not any(k != o and k in o for o in keys)}
    else:
        keys = [k for k in vocab["arch"] if k in grams]
        longest = [k for k in keys if not any(k != o and k in o for o in keys)]
        out["arch"] |= {a for k in longest for a in vocab["arch"][k]}
    found_quant = {name for key, name in vocab["quant"].items() if key in grams}
    if kv:  # "FP8 KV cache": a cache dtype, not a weight quantization
        out["kv"] |= {q for q in found_quant if q.startswith("fp8")}
        found_quant -= out["kv"]
    out["quant"] |= found_quant
    for word, cls in _GPU_WORDS.items():
        if f" {word} " in text or f" {word.replace('sm', 'sm ')} " in text:
            out["gpu"].add(cls)
    for word, platform in _PLATFORM_WORDS.items():
        if word in text or word in title.lower():
            out["platform"].add(platform)
    for word, flag in _FLAG_WORDS.items():
        if f"{word} " in text:
            out["flags"].add(flag)
    for path in files or []:
        if path in vocab["modules"]:
            out["attention"].add(vocab["modules"][path])
    return {k: sorted(v) for k, v in out.items() if v}


# --------------------------------------------------------------------------- matching

def server_features(*, release: str, arch: dict[str, Any], flags: dict[str, Any],
                    gpu: dict[str, Any], quantization: str | None,
                    spec_method: str | None) -> dict[str, set[str]]:
    """What one server runs, in the tags' terms. The attention backend is the forced one,
    else the first the release lists for this GPU class (``default_backends``)."""
    cc = gpu.get("cc")
    gpu_class = f"sm{round(cc * 10)}" if isinstance(cc, (int, float)) and \
        gpu.get("vendor") != "amd" else None
    forced = flags.get("attention_backend")
    attention = {str(forced).upper()} if isinstance(forced, str) and forced else set()
    if not attention and gpu_class:  # vLLM takes the first listed backend that can serve
        table = caps(release)
        order = table.get("default_backends", {}).get(gpu_class, {})
        kv_dtype = flags.get("kv_cache_dtype") if isinstance(flags.get("kv_cache_dtype"),
                                                               str) else None
        first = next((b for b in order.get("mla" if arch.get("is_mla") else "mha") or []
                      if b in table["attention_backends"] and not backend_problems(
                          table["attention_backends"][b], arch, cc, kv_dtype)), None)
        attention = {first} if first else set()
    kv = flags.get("kv_cache_dtype")
    out = {
        "arch": set(arch.get("architectures") or []), "attention": attention,
        "quant": {str(quantization).lower()} if quantization else set(),
        "kv": {kv} if isinstance(kv, str) and kv != "auto" else set(),
        "moe": {str(flags["moe_backend"])} if flags.get("moe_backend") else set(),
        "parser": {p for p in (flags.get("tool_call_parser"), flags.get("reasoning_parser"))
                   if isinstance(p, str) and p},
        "spec": {spec_method} if spec_method else set(),
        "flags": {k for k in ("pipeline_parallel_size", "data_parallel_size")
                  if isinstance(flags.get(k), int) and flags[k] > 1}
        | {k for k in ("enable_prefix_caching", "enable_expert_parallel",
                       "enable_chunked_prefill") if flags.get(k) is True},
        "gpu": {gpu_class} if gpu_class else set(),
        "platform": {"rocm"} if gpu.get("vendor") == "amd" else {"cuda"},
        "mla": ({"yes"} if arch.get("is_mla") else {"no"}) if arch.get("known") else set(),
    }
    if "fp8" in out["kv"] or "fp8_e4m3" in out["kv"]:
        out["kv"] |= {"fp8", "fp8_e4m3"}
    if spec_method:
        out["spec"] |= {spec_method.rstrip("3")}  # eagle3 runs the EAGLE proposer
    return out


def touches(fix: dict[str, list[str]], server: dict[str, set[str]]) -> list[str]:
    """The features through which ``fix`` touches ``server`` ([] = it does not).

    Every scope and every subject the fix names must be the server's; an attention or MoE
    backend the server's report does not reveal (none forced, no default for its GPU) is
    unknown and neither blocks nor counts, except that an MLA-only fix never touches a
    model without MLA (and the other way round). At least one subject must match, or, for
    a fix tagged with architectures only, the architecture."""
    for scope in SCOPES:
        if fix.get(scope) and not set(fix[scope]) & server.get(scope, set()):
            return []
    hits = []
    for key in SUBJECTS:
        want, have = set(fix.get(key) or []), server.get(key, set())
        if not want:
            continue
        if key in ("attention", "moe") and not have:
            mla = server.get("mla")
            if key == "attention" and mla and {"MLA" in n for n in want} == {"no" in mla}:
                return []
            continue
        if not want & have:
            return []
        hits.append(f"{key} {', '.join(sorted(want & have))}")
    if not hits and fix.get("arch") and not any(fix.get(k) for k in SUBJECTS):
        hits = [f"arch {', '.join(sorted(set(fix['arch']) & server['arch']))}"]
    return hits


def lacking(release: str, server: dict[str, set[str]], *, upto: str | None = None,
            limit: int = 5) -> list[dict[str, Any]]:
    """Fixes whose first release is after ``release`` (and at or before ``upto``) that touch
    ``server``, closest first: [{number, title, url, first_release, touches}]."""
    floor, ceiling = Version(release), Version(upto) if upto is not None else None
    found = []
    for fix, first, first_version in dated_fixes():
        if first_version <= floor or (ceiling is not None and first_version > ceiling):
            continue
        hits = touches(fix["features"], server)
        if hits:
            found.append({"number": fix["number"], "title": fix["title"], "url": fix["url"],
                          "first_release": first, "touches": hits})
    found.sort(key=lambda f: (Version(f["first_release"]), f["number"]))
    return found[:limit] if limit else found


def fixes_block(release: str | None, server: dict[str, set[str]] | None) -> dict[str, Any]:
    """``fixes`` context block: ``count`` (all that touch it), ``items`` (the closest five,
    each "#N title (touches ...; first in X) URL"), ``first_release`` (the release carrying
    the closest one), ``all_in`` (the release carrying every one listed)."""
    empty = {"count": 0, "items": [], "first_release": None, "all_in": None}
    if not release or server is None:
        return empty
    every = lacking(release, server, limit=0)
    if not every:
        return empty
    shown = every[:5]
    return {"count": len(every),
            "items": [f"#{f['number']} {f['title']} (touches {'; '.join(f['touches'])}; "
                      f"first in {f['first_release']}) {f['url']}" for f in shown],
            "first_release": shown[0]["first_release"],
            "all_in": max((f["first_release"] for f in shown), key=Version)}
