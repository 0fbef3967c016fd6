"""The "copy command" lines of real pages run nothing a report planted.

A host token holder reports a server whose model path and flag values carry ``$(touch …)``,
backticks and ``;``; the host page and its recommendation page are fetched by a signed-in user
and every ``<pre>`` line is run by bash (with ``vllm``/``docker`` as functions) in a temp dir.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleet.models import Host

pytestmark = pytest.mark.django_db

MODEL = "$HOME/$(touch pwned-model)/cyankiwi/gemma-4-31B-it-AWQ-4bit"
ARGV = ["vllm", "serve", MODEL, "--download-dir", "`touch pwned-dir`",
        "--served-model-name", "x; touch pwned-name", "--max-model-len", "8192"]
_FUNCS = ("vllm() { printf '%s\\0' vllm \"$@\"; }; "
          "docker() { printf '%s\\0' docker \"$@\"; }; ")


def _pre_lines(page: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)]


def test_pasting_any_command_shown_for_a_hostile_report_executes_nothing(
        make_report, enrolled, post_report, client, django_user_model, tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash, "bash is required"
    _, token = enrolled()
    assert post_report(make_report(server={"argv": ARGV}), token=token).status_code == 202
    client.force_login(django_user_model.objects.create_user("op", password="pw"))
    code = Host.objects.get().code
    lines = []
    for url in (f"/hosts/{code}/", f"/hosts/{code}/recommend/"):
        response = client.get(url)
        assert response.status_code == 200, url
        lines += [line for line in _pre_lines(response.content.decode())
                  if line.startswith(("vllm ", "CUDA_VISIBLE_DEVICES=", "docker "))]
    assert any(MODEL in line for line in lines)  # the argv line at least
    assert any(line.startswith("CUDA_VISIBLE_DEVICES=") for line in lines)  # recommended
    assert any(line.startswith("docker ") for line in lines)
    for line in lines:
        done = subprocess.run([bash, "--norc", "-c", _FUNCS + line], cwd=tmp_path,
                              env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (line, done.stderr)
        assert MODEL in done.stdout.split("\0")
    assert list(tmp_path.iterdir()) == []
