"""Paste-ready commands run nothing they quote.

Agent data (model path, ``--download-dir``, any flag value, unknown flags) is planted with
``$(touch …)``, backticks, ``;`` and newlines; each produced line is run by a real ``bash``
whose ``vllm``/``docker`` are functions that print their words, in a temp directory with
``HOME`` pointing there. Nothing may be created, and the words must come back exactly.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from rkit import AWQ_31B, host_report, serve

from advice.recommend import recommend_server
from advice.recommend.plan import HF_CACHE_MOUNT, shell_join
from front.templatetags.fleet_tags import shell_words

H100 = "NVIDIA H100 80GB HBM3"
BASH = shutil.which("bash")
_PRINT_WORDS = ("vllm() { printf '%s\\0' vllm \"$@\"; }; "
                "docker() { printf '%s\\0' docker \"$@\"; }; ")

HOSTILE = {
    "model": "$HOME/$(touch pwned-model)/" + AWQ_31B,
    "--download-dir": "$HOME/$(touch pwned-dir)",
    "--served-model-name": "a;touch pwned-semicolon",
    "--weird-unknown-flag": "`touch pwned-backtick`\ntouch pwned-newline",
    "--revision": "x' ; touch pwned-quote ; '",
}


def _run(line: str, home: Path) -> list[str]:
    """Words the shell passes to vllm/docker when ``line`` is pasted (HOME=``home``)."""
    assert BASH, "bash is required for the shell-quoting test"
    syntax = subprocess.run([BASH, "-n", "-c", line], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c", _PRINT_WORDS + line],
                          cwd=home, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\0")[:-1]


@pytest.fixture
def hostile_recommendation() -> dict:
    flags = [w for k, v in HOSTILE.items() if k != "model" for w in (k, v)]
    report = host_report(H100, 2, serve(HOSTILE["model"], *flags))
    out = recommend_server(report["servers"][0], report)
    assert out["replicas"], out["notes"]
    return out


def test_pasting_the_recommended_commands_executes_nothing(hostile_recommendation: dict,
                                                           tmp_path: Path) -> None:
    for replica in hostile_recommendation["replicas"]:
        words = _run(replica["command"], tmp_path)  # CUDA_VISIBLE_DEVICES=… vllm serve …
        assert words == replica["argv"]
        assert HOSTILE["model"] in words and HOSTILE["--download-dir"] in words
        docker = _run(replica["docker_command"], tmp_path)
        expected = [str(tmp_path) + w[len("$HOME"):] if w is HF_CACHE_MOUNT else w
                    for w in replica["docker"]]
        assert docker == expected
        assert f"{tmp_path}/.cache/huggingface:/root/.cache/huggingface" in docker
    assert list(tmp_path.iterdir()) == []


def test_only_the_planners_own_mount_expands_home(tmp_path: Path) -> None:
    agent_token = "$HOME/.cache/huggingface:/root/.cache/huggingface"  # same text, agent's
    words = _run("docker " + shell_join([HF_CACHE_MOUNT, agent_token]), tmp_path)
    assert words == ["docker", f"{tmp_path}/.cache/huggingface:/root/.cache/huggingface",
                     agent_token]


def test_the_host_pages_argv_line_is_quoted(tmp_path: Path) -> None:
    argv = ["vllm", "serve", *[w for item in HOSTILE.items() for w in item]]
    assert _run(shell_words(argv), tmp_path) == argv
    assert list(tmp_path.iterdir()) == []
