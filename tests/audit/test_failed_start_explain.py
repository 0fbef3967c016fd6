"""Failed starts explained in vLLM's own words (audit.kb.failed_start_explain).

Lines are real: captured from a real vLLM 0.32.0 (``tests/data/real_vllm/0.32.0/failed_starts``,
see its README) and quoted in public reports (``tests/data/failed_start_lines.json``,
``tests/audit/more_cases``, ``tests/audit/blind_cases``; each with its URL).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.kb import raise_sites as rs
from audit.kb.failed_start_explain import edit_argv, explain
from audit.kb.vllm_tables import table
from fleet_agent.failed_starts import clean_lines

DATA = Path(__file__).parents[1] / "data"
REAL_RELEASE = "0.32.0"
CAPTURED = sorted((DATA / "real_vllm" / REAL_RELEASE / "failed_starts").glob("*.json"))
CASE_DIRS = [Path(__file__).parent / "more_cases", Path(__file__).parent / "blind_cases"]


def _captured(name: str) -> dict:
    return json.loads((DATA / "real_vllm" / "0.32.0" / "failed_starts" / f"{name}.json")
                      .read_text())


def capture_lines(case: dict) -> tuple[list[str], str]:
    """(error lines, version) of a capture: the explain captures keep the raw ``log_tail``,
    the real-vLLM suite's (tests/real_vllm) the agent's cleaned ``lines``."""
    lines = clean_lines(case["log_tail"]) if "log_tail" in case else case["lines"]
    return lines, case.get("vllm_version") or REAL_RELEASE


def _explain_capture(name: str):
    case = _captured(name)
    return explain(clean_lines(case["log_tail"]), case["argv"], case["vllm_version"]), case


def public_cases() -> list[tuple[str, list[str], list[str], str | None]]:
    """(source, error lines, argv, version) of every public report in the repo with lines."""
    out = [(row["url"], [row["line"]], [], None) for row in
           json.loads((DATA / "failed_start_lines.json").read_text())["lines"]]
    for folder in CASE_DIRS:
        for path in sorted(folder.glob("*.json")):
            case = json.loads(path.read_text())
            if case.get("error_lines"):
                version = (case.get("vllm_version") or "").split(" ")[0] or None
                out.append((case["source_url"], case["error_lines"], case.get("argv") or [],
                            version))
    return out


def test_every_captured_failure_names_the_setting_and_the_change() -> None:
    assert len(CAPTURED) >= 5, "the real 0.32.0 captures are missing"
    for path in CAPTURED:
        case = json.loads(path.read_text())
        lines, version = capture_lines(case)
        assert lines, f"{path.name}: the agent kept no line"
        found = explain(lines, case["argv"], version)
        assert found.names_setting_and_change, (path.name, found.as_dict())
        assert found.setting in case.get("expect_setting", [found.setting]), path.name
        assert found.failing_command and found.kind != "unrecognised"


def test_a_typo_gets_the_nearest_flag_of_the_release() -> None:
    found, case = _explain_capture("flag_typo")
    assert found.kind == "unknown_flag" and found.setting == "--max-num-seqz"
    assert "--max-num-seqs" in found.change
    assert found.fix_argv == [t.replace("--max-num-seqz", "--max-num-seqs")
                              for t in case["argv"]]
    assert "--max-num-seqs 8" in found.fix_command


def test_an_invalid_choice_lists_the_valid_values_of_that_release() -> None:
    found, _case = _explain_capture("kv_cache_dtype_invalid")
    valid = table("0.32.0")["options"]["--kv-cache-dtype"]["choices"]
    assert found.kind == "invalid_choice" and found.setting == "--kv-cache-dtype"
    assert found.value == "fp9" and found.valid_values == valid
    assert "fp8" in found.change and found.fix_command and "fp9" not in found.fix_command


def test_an_unknown_tool_parser_lists_the_parsers_vllm_named() -> None:
    found, _case = _explain_capture("tool_parser_invalid")
    assert found.kind == "raise_site" and found.setting == "--tool-call-parser"
    assert found.value == "nosuch" and "hermes" in found.valid_values
    assert found.site["at"].startswith("vllm/entrypoints/launchers/launcher.py:")
    assert found.release == "0.32.0" and "matched in" not in found.release_note


def test_a_removed_flag_gets_its_replacement() -> None:
    found = explain(["vllm: error: unrecognized arguments: --disable-log-requests"],
                    ["vllm", "serve", "m", "--disable-log-requests"], "0.11.0")
    assert found.kind == "removed_flag" and "--enable-log-requests" in found.change
    assert found.fix_argv == ["vllm", "serve", "m"]


def test_a_kernel_error_names_the_value_the_operator_forced() -> None:
    # no vLLM check raised it: the value of --moe-backend is in the error text
    lines = ["RuntimeError: FLASHINFER_CUTLASS MoE kernel does not support activation "
             "swigluoai"]
    argv = ["vllm", "serve", "m", "--moe-backend", "flashinfer_cutlass", "-tp", "2"]
    found = explain(lines, argv, "0.32.0")
    assert found.setting == "--moe-backend" and found.value == "flashinfer_cutlass"
    assert found.fix_argv == ["vllm", "serve", "m", "-tp", "2"]


def test_without_an_exception_line_the_cause_is_plainly_not_recognised() -> None:
    found = explain(["Killed"], ["vllm", "serve", "m"], "0.32.0")
    assert found.kind == "unrecognised" and "Killed" in found.summary
    assert found.setting is None and found.change is None


def test_edit_argv_keeps_the_rest_of_the_command() -> None:
    argv = ["vllm", "serve", "m", "--kv-cache-dtype=fp9", "--port", "8000"]
    assert edit_argv(argv, "0.32.0", "--kv-cache-dtype", new_value="fp8") == [
        "vllm", "serve", "m", "--kv-cache-dtype=fp8", "--port", "8000"]
    assert edit_argv(argv, "0.32.0", "--kv-cache-dtype", drop=True) == [
        "vllm", "serve", "m", "--port", "8000"]


@pytest.mark.parametrize("release", ["0.8.5", "0.11.0", "0.20.0", "0.32.0", "0.33.0"])
def test_a_message_quoted_in_public_reports_matches_a_check_of_each_release(
        release: str) -> None:
    # https://github.com/vllm-project/vllm/issues/2652 (the same check in every release)
    line = ("ValueError: Total number of attention heads (52) must be divisible by tensor "
            "parallel size (8).")
    hit = rs.match_line(line, release)
    assert hit is not None and hit.site.release == release
    assert "--tensor-parallel-size" in hit.site.reads
    assert hit.values[:2] == ["52", "8"]


def test_public_reports_figure() -> None:
    """Most public failed-start reports get a setting and a change; none that quotes an
    exception ends as "not recognised"."""
    cases = public_cases()
    results = [(src, explain(lines, argv, version)) for src, lines, argv, version in cases]
    named = [src for src, found in results if found.names_setting_and_change]
    assert len(cases) >= 70
    assert len(named) >= 0.6 * len(cases), f"{len(named)}/{len(cases)}"
    for (_src, lines, _argv, _v), (_s, found) in zip(cases, results, strict=True):
        if found.kind == "unrecognised":
            assert not any(rs.exception_of(line) for line in lines)


@pytest.mark.parametrize(("line", "argv", "fix", "change"), [
    # the API server module refused `serve`: no `serve`, the model in --model
    ("api_server.py: error: unrecognized arguments: serve org/m",
     ["python3", "-m", "vllm.entrypoints.openai.api_server", "vllm", "serve", "org/m",
      "--port", "8000"],
     ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m", "--port",
      "8000"], "drop `vllm serve` from the command and pass the model as --model"),
    # `vllm serve` ran (an image whose entrypoint is `vllm serve`) and the command repeats it:
    # the stray words go, the model stays first
    ("vllm: error: unrecognized arguments: serve org/m",
     ["vllm", "serve", "vllm", "serve", "org/m", "--port", "8000"],
     ["vllm", "serve", "org/m", "--port", "8000"], "drop the repeated `vllm serve`"),
    ("vllm: error: unrecognized arguments: serve org/m",
     ["docker", "run", "--gpus", "all", "vllm/vllm-openai:latest", "vllm", "serve", "org/m"],
     ["docker", "run", "--gpus", "all", "vllm/vllm-openai:latest", "org/m"],
     "drop the repeated `vllm serve`"),
])
def test_the_launcher_refusing_serve_itself_says_drop_it(line, argv, fix, change) -> None:
    """The refused word is `serve`: the explanation tells the operator to drop it, and how
    to pass the model, by which program refused it (it used to fail to explain at all, and
    so failed the whole evaluation)."""
    found = explain([line], argv, "0.17.1")
    assert found.kind == "unknown_flag" and found.setting == "serve"
    assert found.change.startswith(change)
    assert found.fix_argv == fix
