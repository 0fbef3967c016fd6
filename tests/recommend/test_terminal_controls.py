"""A shown or copied command carries no terminal control character.

A local user of a GPU node can start a vLLM-looking process whose argv words hold ESC,
``^U``, newlines, DEL, C1 controls or Unicode bidi/line separators. Single quotes stop the
shell from expanding them, but not the terminal's line editor: pasted into an interactive
bash, ``'m\\x1b[201~\\x15touch pwned\\n'`` erased the line and ran ``touch``. Every command
the product shows (host page "Command line", "Command that failed", crash-loop evidence, the
change history, the recommendation's Copy buttons) goes through one quoting,
:mod:`fleet_agent.shellwords`. Checked with ``bash -c`` (the words come back exactly) and
with a real pty running an interactive bash that the line is pasted into (nothing runs).
"""

from __future__ import annotations

import os
import pty
import select
import shlex
import shutil
import subprocess
import time
import unicodedata
from pathlib import Path

import pytest
from rkit import host_report, serve

from advice.recommend import recommend_server
from fleet_agent import shellwords
from front.templatetags.fleet_tags import shell_words

BASH = shutil.which("bash")
H100 = "NVIDIA H100 80GB HBM3"
_PRINT_WORDS = "vllm() { printf '%s\\0' vllm \"$@\"; }; "
#: In the pty: ``vllm`` says how many words it got (``RAN 5 WORDS``), creating no file.
_COUNT_WORDS = "vllm() { echo RAN $(( $# + 1 )) WORDS; }; "

#: Words a hostile process can carry: ESC ending a bracketed paste, ^U, CR/LF, DEL, C1
#: controls (CSI U+009B, NEL U+0085), bidi override/isolate, line/paragraph separators,
#: zero-width space, and a backslash/quote next to them.
HOSTILE_WORDS = [
    "m\x1b[201~\x15touch pwned-esc\n",
    "x\x15touch pwned-ctrl-u\n",
    "a\rtouch pwned-cr\r",
    "del\x7f\x7f\x7ftouch pwned-del\n",
    "c1\x9b201~\x85touch pwned-c1\n",
    "bidi\u202eevil\u2066x\u2069\u200f",
    "sep\u2028touch pwned-ls\u2029",
    "zw\u200bs\ufeff",
    "q'\\\x1b'\\x1b",
]

FORBIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _forbidden(line: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in line if unicodedata.category(c) in FORBIDDEN]


def _bash_words(line: str, home: Path) -> list[str]:
    """The words ``vllm`` receives when ``bash -c`` runs ``line``."""
    assert BASH, "bash is required for the terminal-control test"
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c", _PRINT_WORDS + line],
                          cwd=home, env={"HOME": str(home), "PATH": "/usr/bin:/bin",
                                         "LC_ALL": "C.UTF-8"},
                          capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8", "surrogatepass").split("\0")[:-1]


def _paste_into_interactive_bash(text: str, home: Path) -> str:
    """Write ``text`` then a newline into an interactive bash on a real pty (what a paste
    is, bracketed paste off), then ``exit``; returns what the terminal showed."""
    assert BASH, "bash is required for the pty paste test"
    parent, child = pty.openpty()
    proc = subprocess.Popen([BASH, "--norc", "--noprofile", "-i"], stdin=child, stdout=child,
                            stderr=child, cwd=home, close_fds=True, start_new_session=True,
                            env={"HOME": str(home), "PATH": "/usr/bin:/bin", "TERM": "xterm",
                                 "PS1": "$ ", "LC_ALL": "C.UTF-8",
                                 "HISTFILE": "/dev/null"})
    os.close(child)
    shown = b""

    def drain(seconds: float) -> None:
        nonlocal shown
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([parent], [], [], 0.05)
            if ready:
                try:
                    shown += os.read(parent, 65536)
                except OSError:
                    return
    try:
        drain(0.5)
        os.write(parent, b"bind 'set enable-bracketed-paste off' 2>/dev/null\n")
        drain(0.3)
        os.write(parent, text.encode("utf-8", "surrogatepass") + b"\n")
        drain(1.0)
        os.write(parent, b"\x03\nexit\n")  # abandon any unfinished line, then leave
        drain(0.5)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(parent)
    return shown.decode("utf-8", "replace")


def test_every_word_is_written_without_control_characters_and_comes_back(tmp_path: Path) -> None:
    argv = ["vllm", "serve", "m", "--served-model-name", *HOSTILE_WORDS]
    for line in (shell_words(argv), shellwords.join(argv)):
        assert _forbidden(line) == []
        assert _bash_words(line, tmp_path) == argv
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("word", HOSTILE_WORDS[:5])
def test_pasting_the_host_pages_command_line_into_a_terminal_runs_nothing(
        word: str, tmp_path: Path) -> None:
    line = shell_words(["vllm", "serve", "m", "--served-model-name", word])
    shown = _paste_into_interactive_bash(_COUNT_WORDS + line, tmp_path)
    assert "RAN 5 WORDS" in shown  # the paste ran the command, with the hostile word as one
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_paste_check_sees_the_attack_single_quotes_let_through(tmp_path: Path) -> None:
    """The pty check is real: the plain ``shlex.join`` of the same word does run ``touch``."""
    line = shlex.join(["vllm", "serve", "m", "--served-model-name", HOSTILE_WORDS[1]])
    _paste_into_interactive_bash(_COUNT_WORDS + line, tmp_path)
    assert (tmp_path / "pwned-ctrl-u").exists()


def test_the_recommended_commands_copy_no_control_character(tmp_path: Path) -> None:
    report = host_report(H100, 2, serve("meta-llama/Llama-3.1-8B-Instruct",
                                        "--served-model-name", HOSTILE_WORDS[0],
                                        "--download-dir", HOSTILE_WORDS[5]))
    out = recommend_server(report["servers"][0], report)
    assert out["replicas"], out["notes"]
    for replica in out["replicas"]:
        for line in (replica["command"], replica["docker_command"]):
            assert _forbidden(line) == [], line
        assert HOSTILE_WORDS[0] in _bash_words(replica["command"], tmp_path)
        shown = _paste_into_interactive_bash(_COUNT_WORDS + replica["command"], tmp_path)
        assert f"RAN {len(replica['argv'])} WORDS" in shown
    assert list(tmp_path.iterdir()) == []


def test_a_long_command_is_cut_between_words_never_inside_a_quote() -> None:
    line = shellwords.join(["vllm", "serve", "a b" * 400, "x\x1by" * 400], max_chars=2000)
    assert len(line) <= 2002 and line.endswith(" …") and _forbidden(line) == []
    assert shlex.split(line)[:2] == ["vllm", "serve"]
