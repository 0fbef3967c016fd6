"""Secrets are redacted by their SHAPE as well as by their name, in every place they go out.

A corpus of credential formats, each built to its issuer's documented prefix and length
(random characters from the documented alphabet; source URL beside each), is planted under
a neutral name in a process's env, as an argv word, inside a log line and inside a model's
``config.json``; none may leave the node (the agent's collection) nor be stored (ingest's
second pass). A second corpus of look-alikes that are NOT secrets must pass unchanged.
"""

from __future__ import annotations

import json
import random
import string

import pytest

from fleet_agent.redact import redact_argv, redact_env, redact_line, redact_text
from fleet_agent.report_redaction import redact_report
from fleet_agent.schema import REDACTED

_RNG = random.Random(25)
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
B64 = ALNUM + "+/"


def _r(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _jwt() -> str:
    # RFC 7519 section 3.1: base64url(header JSON) . base64url(claims JSON) . signature
    import base64

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': _r(ALNUM, 12)})}." \
           f"{_r(B64URL, 43)}"


#: (label, token, source of the format)
CORPUS = [
    ("huggingface", "hf_" + _r(ALNUM, 34), "https://huggingface.co/docs/hub/security-tokens"),
    ("openai-project", "sk-proj-" + _r(B64URL, 48) + "1",
     "https://platform.openai.com/docs/api-reference/authentication"),
    ("github-classic", "ghp_" + _r(ALNUM, 36),
     "https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/"),
    ("github-fine-grained", "github_pat_" + _r(ALNUM, 22) + "_" + _r(ALNUM, 59),
     "https://github.blog/changelog/2022-10-18-introducing-fine-grained-personal-access-tokens/"),
    ("aws-access-key-id", "AKIA" + _r(string.ascii_uppercase + "234567", 16),
     "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html"),
    ("slack-bot", "xoxb-" + _r(string.digits, 12) + "-" + _r(string.digits, 13) + "-"
     + _r(ALNUM, 24), "https://api.slack.com/authentication/token-types"),
    ("slack-app", "xapp-1-" + _r(string.ascii_uppercase + string.digits, 11) + "-"
     + _r(string.digits, 13) + "-" + _r("0123456789abcdef", 64),
     "https://api.slack.com/authentication/token-types"),
    ("slack-webhook", "https://hooks.slack.com/services/T" + _r(string.ascii_uppercase, 8)
     + "/B" + _r(string.ascii_uppercase, 10) + "/" + _r(ALNUM, 24),
     "https://api.slack.com/messaging/webhooks"),
    ("discord-webhook", "https://discord.com/api/webhooks/" + _r(string.digits, 19) + "/"
     + _r(B64URL, 68), "https://discord.com/developers/docs/resources/webhook"),
    ("jwt", _jwt(), "https://www.rfc-editor.org/rfc/rfc7519#section-3.1"),
    ("stripe-live-secret", "sk_live_" + _r(ALNUM, 99), "https://docs.stripe.com/keys"),
    ("stripe-restricted", "rk_live_" + _r(ALNUM, 99), "https://docs.stripe.com/keys"),
    ("gitlab-pat", "glpat-" + _r(B64URL, 20),
     "https://docs.gitlab.com/ee/security/tokens/#token-prefixes"),
    ("gitlab-deploy", "gldt-" + _r(B64URL, 20),
     "https://docs.gitlab.com/ee/security/tokens/#token-prefixes"),
    ("npm", "npm_" + _r(ALNUM, 36),
     "https://github.blog/2021-09-23-announcing-npms-new-access-token-format/"),
    ("sendgrid", "SG." + _r(B64URL, 22) + "." + _r(B64URL, 43),
     "https://www.twilio.com/docs/sendgrid/ui/account-and-settings/api-keys"),
    ("google-api-key", "AIza" + _r(B64URL, 35),
     "https://cloud.google.com/docs/authentication/api-keys"),
    ("azure-sas", "https://acct.blob.core.windows.net/c/blob?sv=2022-11-02&sr=b&sp=r"
     "&se=2026-12-31T00:00:00Z&sig=" + _r(ALNUM, 40) + "%3D",
     "https://learn.microsoft.com/en-us/rest/api/storageservices/create-service-sas"),
    ("postgres-url-slash-hash", "postgres://app:" + _r(ALNUM, 6) + "/" + _r(ALNUM, 4) + "#"
     + _r(ALNUM, 5) + "@db.internal:5432/prod",
     "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS"),
    ("pem-rsa", "-----BEGIN RSA PRIVATE KEY-----\n" + _r(B64, 64) + "\n" + _r(B64, 64)
     + "\n-----END RSA PRIVATE KEY-----", "https://www.rfc-editor.org/rfc/rfc7468"),
    ("pem-openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
     + _r(B64, 46) + "\n" + _r(B64, 70) + "\n-----END OPENSSH PRIVATE KEY-----",
     "https://github.com/openssh/openssh-portable/blob/master/PROTOCOL.key"),
]


def _secret_part(label: str, token: str) -> str:
    """The part that must disappear (a URL's host may stay)."""
    if label.endswith("webhook"):
        return token.rsplit("/", 2)[-1]
    if label == "azure-sas":
        return token.rsplit("sig=", 1)[1]
    if label.startswith("postgres"):
        return token.split("app:", 1)[1].split("@", 1)[0]
    if label.startswith("pem"):
        return token.splitlines()[1]
    return token


IDS = [label for label, _, _ in CORPUS]


@pytest.mark.parametrize(("label", "token", "source"), CORPUS, ids=IDS)
def test_a_token_under_a_neutral_name_is_redacted_everywhere(label, token, source) -> None:
    secret = _secret_part(label, token)
    places = {
        "env": json.dumps(redact_env({"NOTES": token, "X": f"see {token} here"})),
        "argv": json.dumps(redact_argv(["vllm", "serve", "m", token, f"--note={token}"])),
        "text": redact_text(token),
    }
    if "\n" not in token:
        places["log line"] = redact_line(f"ERROR request to upstream failed with {token} (401)")
    else:
        places["log line"] = redact_line(token.replace("\n", " "))
    for place, out in places.items():
        assert secret not in out, f"{label} ({source}) left in {place}: {out}"
        assert REDACTED in out, place


@pytest.mark.parametrize(("label", "token", "source"), CORPUS, ids=IDS)
def test_ingest_redacts_a_token_in_model_files_and_failed_start_lines(label, token,
                                                                      source) -> None:
    report = {"host": {"hostname": "h", "machine_id": "m", "labels": {"note": token}},
              "servers": [{"argv": ["vllm"], "env": {}, "model_files": {"config": {
                  "model_type": "llama", "comment": token, "hf_token": "plain-value-1",
                  "password": "plain-value-2"}}}],
              "failed_starts": [{"lines": [f"Error: {token}", "password hunter2x failed"]}]}
    out = json.dumps(redact_report(report))
    for secret in (_secret_part(label, token), "plain-value-1", "plain-value-2", "hunter2x"):
        assert secret not in out, f"{label} ({source}): {secret!r} left in {out}"


#: Look-alikes that hold no secret and must come back unchanged.
NOT_SECRETS = [
    "sk-learn-intelex", "google/gemma-4-31B-it", "meta-llama/Llama-3.1-8B-Instruct",
    "0123456789abcdef0123456789abcdef01234567", "3f2b8c1e-9d4a-4b6e-8f1a-2c3d4e5f6a7b",
    "AIzawesome", "SG.1", "npm_config_cache", "glpat", "eyJhIjoxfQ", "http://127.0.0.1:8000/v1",
    "postgres://db.internal:5432/prod", "http://10.0.0.5:8000/v1/models@latest",
    "https://hooks.slack.com/", "FATAL: password authentication failed for user \"app\"",
    "the password must be at least 12 characters", "--max-num-batched-tokens=8192",
    "VLLM_ATTENTION_BACKEND=FLASHINFER", "-----BEGIN CERTIFICATE-----",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_look_alikes_pass_unchanged(text: str) -> None:
    assert redact_line(text) == text
    assert redact_text(text) == text
