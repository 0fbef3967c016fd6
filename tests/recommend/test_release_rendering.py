"""The recommended command is written in the target release's own vLLM (issue: vLLM as data).

Oracle: the ground truth read from vLLM's 19 wheels (tests/data/vllm-ground-truth, loaded by
tests/audit/vllm_oracle.py), independent of the shipped tables the product reads. For each
release a flag must be one of that release's spellings, left out when the value is that
release's default, never written when the release lacks the option (a note says so), and a
boolean written in one of that release's forms; the release's own reader (parse_argv) must
read the command back to the values the plan meant.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from advice.recommend import recommend_server
from advice.recommend.core import default_kb
from advice.recommend.plan import Plan, render_argv, render_flag
from audit.kb.engine import KnowledgeBase
from audit.kb.flags import parse_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
from rkit import host_report, serve  # noqa: E402
from vllm_oracle import load  # noqa: E402
from vllm_oracle import releases as oracle_releases  # noqa: E402

RELEASES = oracle_releases()
OLD, MIDDLE, NEWEST = "0.8.5", "0.22.1", RELEASES[-1]
RECOMMEND_DIR = Path(__file__).resolve().parents[2] / "advice" / "recommend"


def _oracle(release: str) -> dict[str, dict[str, Any]]:
    """dest -> {flag, positive (spellings), negative (spellings), default, type} of one
    release, from the ground truth."""
    out = {}
    for flag, record in load("flags")[release].items():
        out[record["dest"]] = {"flag": flag, "positive": {flag, *record.get("aliases", [])},
                               "negative": set(record.get("negative_forms", [])),
                               "default": record.get("default"), "type": record["type"]}
    return out


def _recommender_keys() -> set[str]:
    """Every setting the recommender's code decides: the first argument of ``plan.set`` /
    ``plan.drop`` / ``_set_value`` and ``values["…"] = …`` in advice/recommend (read from
    the source, so a new decision is covered without editing this test)."""
    keys = set()
    for path in RECOMMEND_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and \
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("set", "drop", "_set_value"):
                    keys.add(node.args[0].value)
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    ast.unparse(node.value).endswith("values") and \
                    isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
    return keys


def _samples(entry: dict[str, Any]) -> list[Any]:
    """Values of the option's type, at least one different from its default."""
    kind = entry["type"]
    if kind in ("bool", "flag(store_true)"):
        return [True, False]
    if kind.startswith("list[") or kind.startswith("append["):
        return [["a1", "b2"]] if "str" in kind else [[7, 9]]
    if kind.startswith("json"):
        return [{"k": 1}]
    if kind.startswith("int"):
        return [7, entry["default"]] if isinstance(entry["default"], int) else [7]
    if kind == "float":
        return [0.5, entry["default"]] if isinstance(entry["default"], float) else [0.5]
    return ["x_value"]


def _every_decided_key_with_every_release() -> list[tuple[str, str]]:
    keys = _recommender_keys()
    return [(key, release) for key in sorted(keys) for release in RELEASES]


def test_the_recommender_decides_only_settings_some_release_has() -> None:
    keys = _recommender_keys()
    assert {"tensor_parallel_size", "max_num_seqs", "scheduler_reserve_full_isl",
            "enable_auto_tool_choice", "speculative_config"} <= keys  # the reader works
    known = {dest for release in RELEASES for dest in _oracle(release)}
    assert keys <= known, keys - known


@pytest.mark.parametrize("key, release", _every_decided_key_with_every_release())
def test_a_decided_flag_is_written_as_that_release_spells_it_or_left_out(
        key: str, release: str) -> None:
    oracle = _oracle(release)
    entry = oracle.get(key)
    if entry is None:
        for value in (True, 7, "x_value", {"k": 1}):
            tokens, note = render_flag(key, value, release)
            assert tokens == [], (key, release, tokens)
            assert note and release in note and "left out" in note
        return
    for value in _samples(entry):
        tokens, note = render_flag(key, value, release)
        if value == entry["default"] and type(value) is type(entry["default"]):
            assert tokens == [] and note is None, (key, release, value)
            continue
        if not tokens:  # only a store_true switch asked to be off may be left out
            assert value is False and not entry["negative"] and note
            continue
        assert tokens[0] in entry["positive"] | entry["negative"], (key, release, tokens)
        if value is False:
            assert tokens == [tokens[0]] and tokens[0] in entry["negative"]
        read = parse_argv(["vllm", "serve", "m", *tokens], release)
        assert read.values.get(key) == value, (key, release, tokens, read.values)
        assert not read.unknown and not read.errors


def test_any_kept_operator_flag_is_written_only_in_a_form_its_release_accepts() -> None:
    """Plans keep the operator's own flags too, so the property holds for every setting any
    release has, on every release."""
    every = sorted({dest for release in RELEASES for dest, e in _oracle(release).items()
                    if e["flag"].startswith("-")})  # not the positional model
    for release in RELEASES:
        oracle = _oracle(release)
        for key in every:
            entry = oracle.get(key)
            for value in _samples(entry) if entry else [True, "x_value"]:
                tokens, note = render_flag(key, value, release)
                if entry is None:
                    assert tokens == [] and note, (key, release)
                elif tokens:
                    assert tokens[0] in entry["positive"] | entry["negative"], (key, release)
                    read = parse_argv(["vllm", "serve", "m", *tokens], release).values
                    assert read.get(key) == value, (key, release, tokens, read)


def _empty_kb() -> KnowledgeBase:
    """No rule fires: the recommendation stays on the server's own release, so the command
    is written for the release the test names (what rules say is not this test's subject)."""
    real = default_kb()
    return KnowledgeBase(rules=[], settings=real.settings, version="empty", files=[])


SERVER_FLAGS = ("--gpu-memory-utilization", "0.9", "--enable-auto-tool-choice",
                "--tool-call-parser", "hermes", "--max-num-seqs", "64",
                "--enable-prefix-caching", "--trust-remote-code",
                "--default-chat-template-kwargs", '{"enable_thinking": false}')


@pytest.mark.parametrize("release", [OLD, MIDDLE, NEWEST])
def test_the_same_server_gets_its_command_in_each_release_s_own_flags(release: str) -> None:
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve("Qwen/Qwen3-8B", *SERVER_FLAGS),
                         version=release, template=None)
    item = recommend_server(report["servers"][0], report, kb=_empty_kb())
    assert item["version"]["recommended"] == release
    argv = item["replicas"][0]["argv"]
    oracle = _oracle(release)
    spelled = {s: dest for dest, e in oracle.items() for s in e["positive"] | e["negative"]}
    flags = [t for t in argv if t.startswith("--")]
    assert flags and all(t in spelled for t in flags), [t for t in flags if t not in spelled]
    # 0.9 is 0.8.5's default (left out) but not 0.33's 0.92 (written).
    util_default = oracle["gpu_memory_utilization"]["default"]
    assert ("--gpu-memory-utilization" in argv) == (util_default != 0.9)
    # The chat-template kwargs option exists from 0.15.1 only: written there, noted before.
    if "default_chat_template_kwargs" in oracle:
        assert "--default-chat-template-kwargs" in argv
    else:
        assert "--default-chat-template-kwargs" not in argv
        assert any("--default-chat-template-kwargs is not an option of vLLM "
                   f"{release} (added in 0.15.1)" in n for n in item["notes"]), item["notes"]
        row = next(r for r in item["diff"] if r["flag"] == "--default-chat-template-kwargs")
        assert "left out" in row["recommended"]
    # Booleans: a store_true switch on 0.8.5, the same spelling where it became a
    # BooleanOptionalAction; never a spelling the release would refuse.
    assert "--enable-auto-tool-choice" in argv and "--trust-remote-code" in argv
    read = parse_argv(argv, release)
    assert not read.unknown and read.values["max_num_seqs"] == 64
    assert read.values["enable_prefix_caching"] is True


@pytest.mark.parametrize("release", [OLD, MIDDLE, NEWEST])
def test_turning_a_boolean_off_uses_that_release_s_off_form(release: str) -> None:
    plan = Plan(model="m", values={"scheduler_reserve_full_isl": False,
                                   "enable_prefix_caching": False, "enforce_eager": False},
                version=release)
    argv = render_argv(plan)
    oracle = _oracle(release)
    assert ("--no-enable-prefix-caching" in argv) and \
        "--no-enable-prefix-caching" in oracle["enable_prefix_caching"]["negative"]
    assert "--enforce-eager" not in argv and "--no-enforce-eager" not in argv  # the default
    if "scheduler_reserve_full_isl" in oracle:
        assert "--no-scheduler-reserve-full-isl" in argv
    else:
        assert not any("scheduler-reserve-full-isl" in t for t in argv)
