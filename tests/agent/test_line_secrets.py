"""Secrets in failed-start lines (harden item 3): log lines go through the same redaction as
argv and env values, by a fake journalctl (black box) and as a property over generated lines."""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_agent import failed_starts as fs
from fleet_agent.redact import redact_line

HF = "hf_" + "Q7xk" * 9
LEAKY_LINES = {
    "ERROR auth failed: Authorization: Bearer abc-bearer-1": "abc-bearer-1",
    "ERROR retry with Bearer plainbearer2 failed": "plainbearer2",
    "ERROR client headers={'Authorization': 'Bearer ysecret3'}": "ysecret3",
    "ERROR db password: hunter2hunter2": "hunter2hunter2",
    f"ERROR bad token {HF} for repo": HF,
    "ERROR OpenAI key sk-proj-4bC9dE2fG7hJ1kL3mN5p rejected": "sk-proj-4bC9dE2fG7hJ1kL3mN5p",
    "ERROR git ghp_" + "Z" * 36 + " expired": "ghp_" + "Z" * 36,
    "ERROR s3 AKIAIOSFODNN7EXAMPLE denied": "AKIAIOSFODNN7EXAMPLE",
    'ERROR config {"api_key": "jsonkey5"} refused': "jsonkey5",
    "ERROR upstream x-api-key: xapikey6 refused": "xapikey6",
    "ERROR non-default args: {'model': 'm', 'api_key': ['sk-live1'], 'port': 8001}": "sk-live1",
}
DEEP_LINE = "ERROR bad config " + "[" * 5000 + "]" * 5000


def _fake_systemd(tmp_path: Path, journal: list[str]) -> fs.Sources:
    """systemctl with one crash-looping vLLM unit; journalctl serves ``journal`` for it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    show = ("Id=vllm-a.service\nExecStart={ path=/opt/vllm/bin/vllm ; argv[]=/opt/vllm/bin/vllm "
            "serve m --port 8001 ; }\nActiveState=activating\nSubState=auto-restart\n"
            "Result=exit-code\nNRestarts=3\nExecMainStatus=1\n")
    rows = "\n".join(json.dumps({"MESSAGE": line, "__REALTIME_TIMESTAMP": "1764496800000000"})
                     for line in journal)
    scripts = {
        "systemctl": f"""import sys
if sys.argv[1] == "list-units":
    print("vllm-a.service loaded activating auto-restart vLLM")
elif sys.argv[1] == "show":
    sys.stdout.write({show!r})
""",
        "journalctl": f"print({rows!r})\n",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
    return fs.Sources(path=str(bin_dir), docker_sockets=())


def test_no_secret_of_a_journal_line_leaves_the_node(tmp_path: Path) -> None:
    entries, _ = fs.collect_failed_starts(_fake_systemd(tmp_path, list(LEAKY_LINES)), None,
                                          [], set())
    text = json.dumps(entries)
    assert len(entries[0]["lines"]) == len(LEAKY_LINES)
    for line, secret in LEAKY_LINES.items():
        assert secret not in text, line


def test_a_deeply_nested_line_does_not_hide_the_units_other_lines(tmp_path: Path) -> None:
    journal = ["ERROR first", DEEP_LINE, "RuntimeError: CUDA error: out of memory"]
    entries, notes = fs.collect_failed_starts(_fake_systemd(tmp_path, journal), None, [], set())
    assert notes == []
    lines = entries[0]["lines"]
    assert lines[0] == "ERROR first" and lines[-1] == "RuntimeError: CUDA error: out of memory"
    assert len(lines) == 3


def test_ordinary_error_lines_are_kept_verbatim() -> None:
    for line in ["ValueError: max_num_batched_tokens: 8192 is smaller than max_model_len",
                 "ERROR 11-30 [core.py:1] EngineCore failed to start. 'hf_token': None",
                 "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)"]:
        assert redact_line(line) == line


SECRET_NAMES = ["api_key", "hf_token", "password", "x-api-key", "HF_TOKEN", "OPENAI_API_KEY",
                "client_secret", "auth_token", "apiKey", "passwd"]
TEMPLATES = [
    "{name}={value}", "{name}: {value}", '{{"{name}": "{value}"}}', "{{'{name}': '{value}'}}",
    "{{'{name}': ['{value}']}}", '{{"{name}": ["{value}", "x"]}}', "--{flag} {value}",
    "--{flag}={value}", "Authorization: Bearer {value}", "Bearer {value}", "Basic {value}",
    "headers={{'Authorization': 'Bearer {value}'}}", "{name}='{value}'", '{name}="{value}"',
]
VALUES = st.text(string.ascii_letters + string.digits + "-_.", min_size=6, max_size=40).map(
    lambda v: "Vq9" + v)  # never a plain number, never a word of the surrounding text
NOISE = st.sampled_from(["", "ERROR 11-30 10:00:02 [api_server.py:9] ", "ValueError: ",
                         "  File x, line 3, in main: "])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(SECRET_NAMES), template=st.sampled_from(TEMPLATES), value=VALUES,
       before=NOISE, after=st.sampled_from(["", " (retrying)", ", port=8001", " "]))
def test_a_secret_value_never_survives_line_redaction(name, template, value, before, after):
    line = before + template.format(name=name, flag=name.lower().replace("_", "-"),
                                    value=value) + after
    found: set[str] = set()
    out = redact_line(line, found)
    assert value not in out, (line, out)


def test_chained_pairs_stay_linear_and_a_long_secret_is_redacted_whole() -> None:
    """Pairs are found overlapping; each start scans a bounded value, so a 64 KiB
    ``x=x=x=…`` env value costs one pass (it took 14 s before the bound), and a bare secret
    longer than the bound is still redacted to its end."""
    from fleet_agent.redact import redact_env

    assert redact_env({"X": "x=" * 32000})["X"].startswith("x=")
    line = "ERROR api_key: " + "k" * 5000 + " retrying"
    assert redact_line(line) == "ERROR api_key: REDACTED retrying"
