"""The product's model of vLLM against the ground truth read from vLLM's 19 wheels.

Oracle: tests/data/vllm-ground-truth (README there). For every release: the shipped table is
what the oracle says, every flag in every spelling is read with the right value, batch
defaults match get_batch_defaults() for the usual GPU classes, no flag a release accepts is
called removed, and every flag a release lacks is caught.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_oracle import ORACLE_DIR, load
from vllm_oracle import releases as oracle_releases

from audit.kb.effective import batch_defaults, effective_flags
from audit.kb.flags import not_accepted, parse_argv
from audit.kb.versions import version_tuple
from audit.kb.vllm_extract.build import negatives, spellings
from audit.kb.vllm_extract.ground_truth import tables
from audit.kb.vllm_tables import TABLE_DIR, releases

RELEASES = oracle_releases()


def test_every_oracle_release_ships_a_table_equal_to_what_the_oracle_says() -> None:
    assert list(releases()) == RELEASES
    expected = tables(ORACLE_DIR)
    for release in RELEASES:
        shipped = json.loads((TABLE_DIR / f"{release}.json").read_text())
        assert shipped == json.loads(json.dumps(expected[release])), release
        oracle = load("flags")[release]
        assert set(shipped["options"]) == set(oracle)
        for flag, record in oracle.items():
            entry = shipped["options"][flag]
            assert entry["dest"] == record["dest"] and entry["type"] == record["type"]
            assert set(record.get("aliases", [])) <= set(entry["spellings"])
            assert set(record.get("negative_forms", [])) <= set(entry["negative"])


# --------------------------------------------------------------------------- spellings

def _sample(record: dict) -> tuple[list[str], object]:
    """(value tokens, expected parsed value) for one option, by its oracle type."""
    kind = record["type"]
    choices = [c for c in record.get("choices") or []
               if c not in ("None", None) and not str(c).startswith("<expr")]
    inner = kind[5:-1] if kind.startswith("list[") else kind
    inner = inner[7:-1] if inner.startswith("append[") else inner
    if inner.startswith("int"):
        one, value = ("2k", 2000) if "human" in inner else ("7", 7)
    elif inner == "float":
        one, value = "0.5", 0.5
    elif inner == "bool(value)":
        one, value = "false", False
    elif inner.startswith("json"):
        one, value = '{"k": 1}', {"k": 1}
    elif choices:
        one, value = str(choices[0]), choices[0]
    else:
        one, value = "abc", "abc"
    if kind.startswith("list["):
        return [one, one], [value, value]
    if kind.startswith("append["):
        return [one], [value]
    return [one], value


def _spelling_cases(release: str) -> list[tuple[str, str, dict, bool]]:
    cases = []
    for flag, record in load("flags")[release].items():
        if not flag.startswith("-"):
            continue  # the model positional
        cases += [(flag, s, record, False) for s in spellings(flag, record)]
        cases += [(flag, s, record, True) for s in negatives(record)]
    return cases


def _check(release: str, spelling: str, record: dict, negative: bool) -> str | None:
    """None when read right, else why not."""
    dest = record["dest"]
    takes_none = record["type"] in ("bool", "flag(store_true)") or \
        record.get("action") in ("store_true", "BooleanOptionalAction")
    if negative or takes_none:
        argv, expected = ["vllm", "serve", spelling, "m/x"], not negative
    else:
        tokens, expected = _sample(record)
        if dest == "model":
            argv, expected = ["vllm", "serve", spelling, *tokens], tokens[0]
        elif record.get("nargs") in ("+", "?") or record["type"].startswith("list["):
            argv = ["vllm", "serve", "m/x", spelling, *tokens]
        else:
            argv = ["vllm", "serve", spelling, *tokens, "m/x"]
    parsed = parse_argv(argv, release)
    got = parsed.values.get(dest, "<missing>")
    if got != expected:
        return f"{spelling}: got {got!r}, expected {expected!r}"
    if dest != "model" and parsed.values.get("model") != "m/x":
        return f"{spelling}: model read as {parsed.values.get('model')!r}"
    if parsed.unknown or not_accepted(parsed, release):
        return f"{spelling}: left unknown={parsed.unknown} not_accepted=" \
               f"{not_accepted(parsed, release)}"
    return None


# Spellings the product reads differently from argparse, with the reason.
KNOWN_DIFFERENCES: dict[str, str] = {}


@pytest.mark.parametrize("release", RELEASES)
def test_every_flag_in_every_spelling_is_read_with_the_right_value(release: str) -> None:
    cases = _spelling_cases(release)
    wrong = [w for w in (_check(release, s, r, n) for _, s, r, n in cases) if w]
    unexplained = [w for w in wrong if w.split(":")[0] not in KNOWN_DIFFERENCES]
    assert len(cases) > 100
    assert len(wrong) <= len(cases) // 100, wrong
    assert not unexplained, unexplained


@pytest.mark.parametrize("release", RELEASES)
def test_no_flag_a_release_accepts_is_called_removed_or_unknown(release: str) -> None:
    argv = ["vllm", "serve", "m/x"]
    for flag, record in load("flags")[release].items():
        if flag.startswith("-") and record["dest"] != "model":
            argv.append(flag)
            if not (record["type"] in ("bool", "flag(store_true)")
                    or record.get("action") in ("store_true", "BooleanOptionalAction")):
                argv += _sample(record)[0]
    flags, meta = effective_flags(parse_argv(argv, release), release, 80.0, "NVIDIA H100")
    assert meta["not_accepted"] == [] and meta["removed"] == []
    assert meta["unknown"] == []


@pytest.mark.parametrize("release", RELEASES)
def test_every_flag_absent_from_a_release_is_caught(release: str) -> None:
    every = {flag for rows in load("flags").values() for flag in rows if flag.startswith("-")}
    accepted = {s for flag, record in load("flags")[release].items()
                for s in [*spellings(flag, record), *negatives(record)]}
    absent = sorted(every - accepted)  # --disable-log-requests is a 0.33 negative form
    caught = 0
    for flag in absent:
        parsed = parse_argv(["vllm", "serve", "m/x", flag], release)
        found = not_accepted(parsed, release)
        assert [f["flag"] for f in found] == [flag], flag
        caught += 1
        later = [r for r in RELEASES if flag in load("flags")[r]]
        if version_tuple(later[0]) < version_tuple(release):
            assert found[0]["reason"] == "removed"
            assert flag not in load("flags")[found[0]["removed_in"]]
        else:
            assert found[0]["reason"] == "added_later" and found[0]["added_in"] == later[0]
    assert caught == len(absent)


# --------------------------------------------------------------------------- batch defaults

GIB = 2**30
# (name as NVML reports it, memory in GiB as NVML reports it, compute capability, platform)
GPU_CLASSES = {
    "H100": ("NVIDIA H100 80GB HBM3", 79.65, (9, 0), "cuda"),
    "H200": ("NVIDIA H200", 139.8, (9, 0), "cuda"),
    "B200": ("NVIDIA B200", 178.36, (10, 0), "cuda"),
    "A100-40": ("NVIDIA A100-SXM4-40GB", 39.39, (8, 0), "cuda"),
    "A100-80": ("NVIDIA A100-SXM4-80GB", 79.15, (8, 0), "cuda"),
    "L40S": ("NVIDIA L40S", 44.39, (8, 9), "cuda"),
    "RTX 4090": ("NVIDIA GeForce RTX 4090", 23.99, (8, 9), "cuda"),
    "RTX 5090": ("NVIDIA GeForce RTX 5090", 31.84, (12, 0), "cuda"),
    "RTX PRO 6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 94.97, (12, 0), "cuda"),
    "GB10": ("NVIDIA GB10", 119.7, (12, 1), "cuda"),
    "MI300X": ("AMD Instinct MI300X", 191.98, (9, 4), "rocm"),
}


class _Platform:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def is_tpu(self) -> bool:
        return self.kind == "tpu"

    def is_cpu(self) -> bool:
        return self.kind == "cpu"


def _oracle_batch(release: str, gpu: tuple) -> tuple[object, object]:
    """Evaluate the oracle's own Python conditions (test data, trusted) for one GPU."""
    name, memory, cap, platform = gpu
    names = {"device_memory": memory * GIB, "GiB_bytes": GIB, "device_name": name.lower(),
             "is_gb10": tuple(cap) == (12, 1), "current_platform": _Platform(platform),
             "chip_name": name}
    for row in load("batch_defaults")[release]["table"]:
        if "current_platform" in row["when"]:
            continue
        if eval(row["when"], {"__builtins__": {}}, names):  # noqa: S307 - our test data
            seqs, tokens = row["max_num_seqs"], row["max_num_batched_tokens"]
            seqs = seqs["OPENAI_API_SERVER"] if isinstance(seqs, dict) else seqs
            return seqs, tokens["OPENAI_API_SERVER"]
    raise AssertionError(f"no branch for {name} on {release}")


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("gpu_class", sorted(GPU_CLASSES))
def test_batch_defaults_match_get_batch_defaults(release: str, gpu_class: str) -> None:
    name, memory, cap, _ = GPU_CLASSES[gpu_class]
    seqs, tokens, rule = batch_defaults(version_tuple(release), memory, name,
                                        f"{cap[0]}.{cap[1]}")
    assert (seqs, tokens) == _oracle_batch(release, GPU_CLASSES[gpu_class]), rule


def test_the_tiers_the_hand_model_got_wrong() -> None:
    h200 = (139.8, "NVIDIA H200")
    b200 = (178.36, "NVIDIA B200")
    assert batch_defaults(version_tuple("0.27.0"), *b200)[:2] == (1024, 8192)
    assert batch_defaults(version_tuple("0.28.0"), *b200)[:2] == (1024, 16384)
    assert batch_defaults(version_tuple("0.28.0"), *h200)[:2] == (1024, 8192)
    gb10 = (119.7, "NVIDIA GB10", "12.1")
    assert batch_defaults(version_tuple("0.32.0"), *gb10)[:2] == (1024, 8192)
    assert batch_defaults(version_tuple("0.33.0"), *gb10)[:2] == (256, 2048)
    a100 = (79.15, "NVIDIA A100-SXM4-80GB")
    assert batch_defaults(version_tuple("0.8.5"), *a100)[:2] == (1024, 8192)
    assert batch_defaults(version_tuple("0.9.2"), *a100)[:2] == (256, 2048)


# --------------------------------------------------------------------------- the cases

def test_disable_prefix_caching_on_0_33_does_not_swallow_the_model() -> None:
    parsed = parse_argv(["vllm", "serve", "--disable-prefix-caching", "g/m"], "0.33.0")
    assert parsed.values == {"enable_prefix_caching": False, "model": "g/m"}
    older = parse_argv(["vllm", "serve", "--disable-prefix-caching", "g/m"], "0.30.0")
    assert not_accepted(older, "0.30.0")[0]["reason"] == "added_later"
    assert older.values["model"] == "g/m"


def test_device_memory_utilization_alias_sets_gpu_memory_utilization_from_0_31() -> None:
    argv = ["vllm", "serve", "g/m", "--device-memory-utilization", "0.94"]
    flags, meta = effective_flags(parse_argv(argv, "0.31.0"), "0.31.0", 80.0, "NVIDIA H100")
    assert flags["gpu_memory_utilization"] == 0.94 and meta["source"]["gpu_memory_utilization"] \
        == "argv"
    flags, meta = effective_flags(parse_argv(argv, "0.30.0"), "0.30.0", 80.0, "NVIDIA H100")
    assert [r["flag"] for r in meta["not_accepted"]] == ["--device-memory-utilization"]


def test_spec_shorthands_fill_the_speculative_config_from_0_22() -> None:
    argv = ["vllm", "serve", "g/m", "--spec-method", "eagle3", "--spec-model", "d/r",
            "--spec-tokens", "3"]
    parsed = parse_argv(argv, "0.22.1")
    assert parsed.values["speculative_config"] == {"method": "eagle3", "model": "d/r",
                                                   "num_speculative_tokens": 3}
    assert not_accepted(parsed, "0.22.1") == []
    assert {r["flag"] for r in not_accepted(parse_argv(argv, "0.20.0"), "0.20.0")} == \
        {"--spec-method", "--spec-model", "--spec-tokens"}


def test_the_oracle_copy_is_inside_the_repository() -> None:
    assert ORACLE_DIR.is_dir() and Path(__file__).resolve().parents[1] in ORACLE_DIR.parents
    assert len(load("batch_defaults")["_provenance"]) == len(RELEASES) == 19
