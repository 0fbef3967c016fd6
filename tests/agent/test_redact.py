"""Secrets never leave the node: unit examples and a property test over whole reports."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fa_fakenode import FakeNode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_agent import redact
from fleet_agent.collect import CycleInput, collect
from fleet_agent.config import AgentConfig, ServerOverride
from fleet_agent.schema import REDACTED


def test_secret_flags_lose_their_value_in_both_spellings() -> None:
    argv = ["vllm", "serve", "m/x", "--api-key", "sk-1", "sk-2", "--hf-token=hf_x",
            "--hf_token", "hf_y", "--port", "8000"]
    assert redact.redact_argv(argv) == [
        "vllm", "serve", "m/x", "--api-key", REDACTED, REDACTED, f"--hf-token={REDACTED}",
        "--hf_token", REDACTED, "--port", "8000"]


def test_counts_and_lookalike_flags_are_not_secrets() -> None:
    argv = ["vllm", "serve", "m/x", "--max-num-batched-tokens", "8192", "--tokenizer",
            "google/gemma-4-31B-it", "--kv-cache-dtype", "fp8", "--speculative-config",
            '{"model": "m/d", "num_speculative_tokens": 4}', "--key-cache-size", "4096"]
    assert redact.redact_argv(argv) == argv


def test_a_numeric_value_of_a_secret_named_flag_is_kept() -> None:
    assert redact.redact_argv(["--secret-count", "3"]) == ["--secret-count", "3"]
    assert redact.redact_env({"NCCL_KEY_TIMEOUT": "30"}) == {"NCCL_KEY_TIMEOUT": "30"}


def test_environment_secrets_are_matched_on_whole_words() -> None:
    env = {"HF_TOKEN": "hf_abc", "VLLM_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s",
           "DB_PASSWORD": "p", "TOKENIZERS_PARALLELISM": "false", "KEYBOARD": "us",
           "MONKEY": "x", "NUM_TOKENS": "12", "MAX_TOKENS": "12ab"}
    out = redact.redact_env(env)
    assert [k for k, v in out.items() if v == REDACTED] == [
        "HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MAX_TOKENS"]


def test_credentials_in_urls_and_query_strings_are_removed() -> None:
    env = {"HTTPS_PROXY": "http://bob:hunter2@proxy:3128",
           "HF_ENDPOINT": "https://hf-mirror.com/?token=abc123&x=1"}
    assert redact.redact_env(env) == {
        "HTTPS_PROXY": f"http://{REDACTED}@proxy:3128",
        "HF_ENDPOINT": f"https://hf-mirror.com/?token={REDACTED}&x=1"}


def test_json_valued_flags_and_docker_env_words_are_redacted() -> None:
    argv = ["docker", "run", "-e", "HF_TOKEN=hf_zzz", "img", "--speculative-config",
            '{"model": "m", "hf_token": "hf_q", "nested": {"apiKey": "k1"}}']
    out = redact.redact_argv(argv)
    assert out[3] == f"HF_TOKEN={REDACTED}"
    assert json.loads(out[6]) == {"model": "m", "hf_token": REDACTED,
                                  "nested": {"apiKey": REDACTED}}


def test_truncated_json_is_still_redacted() -> None:
    out = redact.redact_text('{"api_key": "abc", "x": <truncated>')
    assert "abc" not in out and REDACTED in out


def test_scrub_removes_known_secrets_anywhere() -> None:
    data = {"a": ["prefix sk-long-secret suffix"], "b": {"c": "short"}}
    assert redact.scrub(data, {"sk-long-secret", "short"}) == {
        "a": [f"prefix {REDACTED} suffix"], "b": {"c": "short"}}


_SECRET = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789_-.~!",
                  min_size=8, max_size=24).map(lambda s: "Zq" + s)
_FLAG = st.sampled_from(["--api-key", "--hf-token", "--hf_token", "--my-secret",
                         "--db-password", "--aws-secret-access-key", "--credential"])
_ENV = st.sampled_from(["HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "MY_PASSWD",
                        "WANDB_API_KEY", "GH_TOKEN", "SOME_CREDENTIAL"])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(flag=_FLAG, flag_secret=_SECRET, eq_form=st.booleans(), env_name=_ENV,
       env_secret=_SECRET, url_user=_SECRET, url_pass=_SECRET, json_secret=_SECRET)
def test_planted_secrets_never_reach_the_serialized_report(
        flag, flag_secret, eq_form, env_name, env_secret, url_user, url_pass,
        json_secret) -> None:
    secret_flag = [f"{flag}={flag_secret}"] if eq_form else [flag, flag_secret]
    argv = ["/opt/v/bin/python3", "/opt/v/bin/vllm", "serve", "org/model", *secret_flag,
            "--max-num-batched-tokens", "8192", "--speculative-config",
            json.dumps({"model": "org/draft", "hf_token": json_secret}),
            "--lora-modules", f"a=https://{url_user}:{url_pass}@example.com/lora"]
    env = {env_name: env_secret, "HTTPS_PROXY": f"http://{url_user}:{url_pass}@proxy:3128"}
    with tempfile.TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp))
        pids = node.add_vllm(argv, env=env, listen=())
        # the config's own secrets: an api key for /v1 and a proxy URL with credentials
        config = AgentConfig(token=json_secret[::-1], servers=[ServerOverride(
            match_pid=pids.server, api_key=flag_secret[::-1],
            base_url=f"http://{url_user}:{url_pass}@127.0.0.1:9")])
        report = collect(CycleInput(config=config, root=node.root, gpu_source="none",
                                    probe_http=False))
    text = report.model_dump_json()
    for secret in (flag_secret, env_secret, url_user, url_pass, json_secret,
                   json_secret[::-1], flag_secret[::-1]):
        assert secret not in text
        assert json.dumps(secret)[1:-1] not in text
    entry = report.servers[0]
    assert "--max-num-batched-tokens" in entry.argv and "8192" in entry.argv
    assert entry.env[env_name] == REDACTED


def test_an_exception_message_is_kept_and_a_secret_in_it_is_not() -> None:
    """``KeyError: '…'`` is an error message (the crash's cause on the host page), not a
    pair named "key"; a token-shaped secret inside a message is still removed."""
    line = "(APIServer pid=9) KeyError: 'invalid tool call parser: openai (chose from { hermes })'"
    assert redact.redact_line(line) == line
    leaked = redact.redact_line("AuthenticationError: bad key sk-live-0123456789abcdefghij")
    assert "sk-live-0123456789abcdefghij" not in leaked
    assert redact.redact_line("KEY_ERROR=abc123def") == f"KEY_ERROR={REDACTED}"
