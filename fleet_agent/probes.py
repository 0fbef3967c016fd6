"""Opt-in live probes: tiny requests that test a known issue on the server itself.

Run only when an operator asked for them (the dashboard's report answer, or
``fleet-agent probe --print``). Each probe sends a few capped requests to the server's own
base URL (the same address the agent already reads ``/metrics`` from; the api key only to a
loopback/unix endpoint or the configured base_url, see ``collect._configured_key``) and returns
one :class:`fleet_agent.schema.ProbeOutcome`-shaped dict. Nothing raises: a failure is an
``error`` outcome. Evidence is cut to :data:`EVIDENCE_CHARS` and redacted by the caller.

Probes and their sources (the cheap test each advisory names):

* ``stream_control_tokens``: vLLM #49955 (Gemma 4 streamed output ends with ``<turn|>``),
  https://github.com/vllm-project/vllm/issues/49955
* ``forced_tool_choice``: #50477 (named/``required`` tool_choice ends without a tool call),
  https://github.com/vllm-project/vllm/issues/50477
* ``tool_continuation_cot``: #45834 / #45852 (reasoning dropped or leaked into ``content`` on a
  continuation after a tool response, thinking on)
* ``draft_acceptance``: #50158 and seeds 001/003 (EAGLE3 acceptance collapse; measured on real
  text from the server's own spec-decode counters, never random tokens)
* ``template_identity``: the chat template in use, rendered by the server's ``/tokenize``
  (``messages`` form) for a tool-terminated conversation.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx

from fleet_agent.probe import make_client, read_capped
from fleet_agent.schema import MAX_PROBE_EVIDENCE_CHARS, PROBE_NAMES

#: Seconds one probe may take in all (its requests share it): a probe must never hold the
#: agent's cycle for long, and a healthy server answers 48 tokens in well under that.
PROBE_TIMEOUT_S = 20.0
#: Seconds all probes of one server may take in one cycle; a probe not started by then is
#: reported ``skipped`` and runs when next asked, so probes never hold the cycle's budget.
PROBES_BUDGET_S = 30.0
#: Output tokens per request: enough for a control token to show at the tail, cheap otherwise.
MAX_TOKENS = 48
#: Largest response body read per request (an SSE stream of 48 tokens is ~10 KiB).
MAX_BODY_BYTES = 256 * 1024
EVIDENCE_CHARS = 300
#: Raw control tokens that must never reach a client's text: Gemma 4's ``<turn|>``/``<|turn>``
#: (#49955), Gemma 2/3 turn markers, ChatML ``<|im_end|>``, Llama 3 header/eot tokens.
CONTROL_TOKEN = re.compile(r"<turn\|>|<\|turn>|<(?:start|end)_of_turn>|<\|im_(?:start|end)\|>|"
                           r"<\|eot_id\|>|<\|(?:start|end)_header_id\|>|<\|channel>|<channel\|>")
#: Reasoning markers that must not appear in ``content`` when a reasoning parser is on.
COT_MARKER = re.compile(r"</?think>|<\|channel>|<channel\|>|<\|thought\|>")
#: Acceptance (accepted / proposed draft tokens) under which the drafter has collapsed. Seeds
#: 001/003: EAGLE3 on real text accepts 0.5-0.8 at k=3; #50158's collapse reads below 0.1.
COLLAPSED_ACCEPTANCE = 0.2
#: Short real-text prompts (not random tokens: seed 003 calls those meaningless for a drafter).
DRAFT_PROMPTS = (
    "Explain in two sentences why the sky looks blue during the day.",
    "Write a short Python function that returns the factorial of n.",
    "List three common uses of copper and say why it suits each.",
    "Summarise the plot of Romeo and Juliet in three sentences.",
)
#: Metric families of speculative decoding (vLLM V1 names; ``_total`` in the exposition).
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"

_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


#: Key of a probe request meaning every server of the node (``fleet-agent probe --print``).
ALL_SERVERS = "*"
#: vLLM's default ``--port`` (vllm/entrypoints/openai/cli_args.py).
DEFAULT_VLLM_PORT = 8000
_PORT_FLAG = re.compile(r"^--port(?:=(\d+))?$")


def slot_of(base_url: str | None, argv: list[str]) -> str:
    """The server's identity as the dashboard names it (``fleet.recording.server_identity``,
    which the dashboard's probe requests use): ``port:8000`` or ``unix:/path``."""
    if base_url:
        if base_url.startswith("unix:"):
            return base_url[:255]
        try:
            port = urlsplit(base_url).port
        except ValueError:
            port = None
        if port:
            return f"port:{port}"
    for i, arg in enumerate(argv):
        if arg == "--uds" and i + 1 < len(argv):
            return f"unix:{argv[i + 1]}"[:255]
        if arg.startswith("--uds="):
            return f"unix:{arg.split('=', 1)[1]}"[:255]
        match = _PORT_FLAG.match(arg)
        if match:
            value = match.group(1) or (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                return f"port:{int(value)}"
    return f"port:{DEFAULT_VLLM_PORT}"


class _Budget:
    """One probe's deadline; each request gets what is left (at least 1 s)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("probe timeout reached")
        return max(1.0, left)


class Server:
    """The server a probe talks to: ``base_url``, optional api key and served model id."""

    def __init__(self, base_url: str, model: str | None, api_key: str | None = None,
                 timeout_s: float = PROBE_TIMEOUT_S):
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.timeout_s = timeout_s
        self.client: httpx.Client | None = None
        self.budget = _Budget(timeout_s)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        """POST JSON; returns ``(status, body text)`` capped at :data:`MAX_BODY_BYTES`."""
        assert self.client is not None
        with self.client.stream("POST", path, json=body, headers=self.headers(),
                                timeout=self.budget.left()) as response:
            return response.status_code, read_capped(response, MAX_BODY_BYTES,
                                                     self.budget.deadline).text()

    def get(self, path: str) -> tuple[int, str]:
        assert self.client is not None
        with self.client.stream("GET", path, timeout=self.budget.left()) as response:
            return response.status_code, read_capped(response, 8 * 1024 * 1024,
                                                     self.budget.deadline).text()

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """One non-streamed chat completion; raises :class:`ProbeError` on HTTP or JSON errors."""
        body = {"model": self.model, "messages": messages, "temperature": 0,
                "max_tokens": MAX_TOKENS, **extra}
        status, text = self.post("/v1/chat/completions", body)
        if status != 200:
            raise ProbeError(f"POST /v1/chat/completions: HTTP {status}: {text[:200]}")
        try:
            answer = json.loads(text)
            return answer["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProbeError(f"POST /v1/chat/completions: unreadable answer ({exc})") from exc


class ProbeError(RuntimeError):
    """The probe could not reach a verdict (HTTP error, unreadable answer)."""


Verdict = tuple[str, str]  # (outcome, evidence)


def _tail(text: str, chars: int = 120) -> str:
    return text[-chars:]


def stream_control_tokens(server: Server) -> Verdict:
    """Temperature-0 streamed completion; confirmed when raw control tokens reach the text."""
    body = {"model": server.model, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": True,
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}]}
    status, text = server.post("/v1/chat/completions", body)
    if status != 200:
        raise ProbeError(f"POST /v1/chat/completions (stream): HTTP {status}")
    content = "".join(_stream_deltas(text))
    found = CONTROL_TOKEN.findall(content)
    if found:
        return "confirmed", f"stream tail carries {sorted(set(found))}: {_tail(content)!r}"
    return "not_reproduced", f"stream tail clean: {_tail(content)!r}"


def _stream_deltas(sse: str) -> list[str]:
    """``delta.content`` of each ``data:`` event of an OpenAI-style SSE stream."""
    out: list[str] = []
    for line in sse.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            delta = json.loads(line[5:])["choices"][0].get("delta") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            continue
        if isinstance(delta.get("content"), str):
            out.append(delta["content"])
    return out


def forced_tool_choice(server: Server) -> Verdict:
    """Named and ``required`` tool_choice; confirmed when either ends without a parseable call.

    An answer cut off at ``max_tokens`` (``finish_reason: length``) proves nothing about the
    server (a small or random model may simply not finish the call in :data:`MAX_TOKENS`):
    when that is the only failure the outcome is ``skipped`` (inconclusive), never confirmed.
    """
    ask = [{"role": "user", "content": "What time is it in Paris?"}]
    failures, truncated, notes = [], [], []
    for label, choice in (("named", {"type": "function", "function": {"name": "get_time"}}),
                          ("required", "required")):
        answer = server.chat(ask, tools=[_TOOL], tool_choice=choice)
        problem = _tool_call_problem(answer)
        if problem and answer.get("finish_reason") == "length":
            truncated.append(f"{label}: cut off at max_tokens ({problem})")
        else:
            (failures if problem else notes).append(f"{label}: {problem or 'tool call parsed'}")
    if failures:
        return "confirmed", "; ".join(failures + truncated + notes)
    if truncated:
        return "skipped", "inconclusive: " + "; ".join(truncated + notes)
    return "not_reproduced", "; ".join(notes)


def _tool_call_problem(choice: dict[str, Any]) -> str:
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    finish = choice.get("finish_reason")
    if not calls:
        return (f"no tool_calls (finish_reason {finish!r}), content "
                f"{str(message.get('content') or '')[:80]!r}")
    try:
        json.loads(calls[0]["function"]["arguments"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"tool call arguments do not parse ({type(exc).__name__})"
    return ""


def tool_continuation_cot(server: Server) -> Verdict:
    """A conversation ending on a tool response, thinking on; confirmed when the reasoning
    leaks into ``content`` or the answer comes back empty (reasoning dropped)."""
    messages = [
        {"role": "user", "content": "What time is it in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_probe", "type": "function",
            "function": {"name": "get_time", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_probe", "content": "14:05"},
    ]
    answer = server.chat(messages, tools=[_TOOL], max_tokens=2 * MAX_TOKENS,
                         chat_template_kwargs={"enable_thinking": True})
    message = answer.get("message") or {}
    content = str(message.get("content") or "")
    reasoning = str(message.get("reasoning_content") or message.get("reasoning") or "")
    if COT_MARKER.search(content):
        return "confirmed", f"reasoning markers in content: {content[:160]!r}"
    if not content.strip() and not reasoning.strip():
        return "confirmed", "empty content and no reasoning after the tool response"
    return "not_reproduced", (f"content {content[:80]!r}; reasoning "
                              f"{len(reasoning)} chars")


def counter_total(metrics_text: str, family: str) -> float | None:
    """Sum of the samples of counter ``family`` (``_total`` suffix or not, any labels) in a
    Prometheus text exposition; None when the family is absent. Only unlabelled-or-labelled
    sample lines of one family are read (the agent ships without prometheus_client)."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        if not line.startswith(family):
            continue
        rest = line[len(family):]
        if rest.startswith("_total"):
            rest = rest[len("_total"):]
        if rest.startswith("{"):
            rest = rest[rest.find("}") + 1:] if "}" in rest else ""
        elif not rest.startswith(" "):
            continue  # another family sharing the prefix (e.g. ..._per_pos)
        try:
            total += float(rest.split()[0])
            seen = True
        except (ValueError, IndexError):
            continue
    return total if seen else None


def draft_acceptance(server: Server) -> Verdict:
    """Acceptance of the drafter on :data:`DRAFT_PROMPTS` from the server's own counters;
    skipped without speculative decoding; confirmed under :data:`COLLAPSED_ACCEPTANCE`."""
    before = _spec_counters(server)
    if before is None:
        return "skipped", "no spec-decode counters in /metrics (speculative decoding off)"
    for prompt in DRAFT_PROMPTS:
        server.chat([{"role": "user", "content": prompt}])
    after = _spec_counters(server)
    if after is None:
        raise ProbeError("spec-decode counters vanished (server restarted?)")
    drafted, accepted = after[0] - before[0], after[1] - before[1]
    if drafted <= 0:
        return "skipped", "no draft tokens proposed during the probe"
    rate = accepted / drafted
    evidence = (f"acceptance {rate:.2f} ({accepted:.0f}/{drafted:.0f} draft tokens on "
                f"{len(DRAFT_PROMPTS)} real-text prompts; collapse below {COLLAPSED_ACCEPTANCE})")
    return ("confirmed" if rate < COLLAPSED_ACCEPTANCE else "not_reproduced"), evidence


def _spec_counters(server: Server) -> tuple[float, float] | None:
    status, text = server.get("/metrics")
    if status != 200:
        raise ProbeError(f"GET /metrics: HTTP {status}")
    drafted, accepted = counter_total(text, DRAFT_TOKENS), counter_total(text, ACCEPTED_TOKENS)
    return None if drafted is None or accepted is None else (drafted, accepted)


def template_identity(server: Server) -> Verdict:
    """Render a tool-terminated conversation through ``POST /tokenize``; confirmed when the
    template in use drops the tool response (its marker is missing from the rendering).
    Evidence carries the rendering's sha256 so the dashboard can compare it across reports."""
    marker = "probe-tool-result-7f3a"
    body = {"model": server.model, "add_generation_prompt": True, "return_token_strs": True,
            "messages": [{"role": "user", "content": "What time is it in Paris?"},
                         {"role": "assistant", "content": "", "tool_calls": [{
                             "id": "call_probe", "type": "function", "function": {
                                 "name": "get_time", "arguments": "{\"city\": \"Paris\"}"}}]},
                         {"role": "tool", "tool_call_id": "call_probe", "content": marker}]}
    status, text = server.post("/tokenize", body)
    if status in (404, 405):
        return "skipped", "this release has no /tokenize endpoint"
    if status != 200:
        raise ProbeError(f"POST /tokenize: HTTP {status}")
    try:
        answer = json.loads(text)
        rendered = "".join(answer.get("token_strs") or [])
    except (ValueError, AttributeError, TypeError) as exc:
        raise ProbeError("POST /tokenize: unreadable answer") from exc
    digest = hashlib.sha256(rendered.encode("utf-8")).hexdigest()[:16]
    if marker.replace("-", "") not in rendered.replace("-", "").replace(" ", ""):
        return "confirmed", f"tool response missing from the rendered prompt (sha256 {digest})"
    return "not_reproduced", f"tool response rendered (sha256 {digest}, {len(rendered)} chars)"


PROBES: dict[str, Callable[[Server], Verdict]] = {
    "stream_control_tokens": stream_control_tokens,
    "forced_tool_choice": forced_tool_choice,
    "tool_continuation_cot": tool_continuation_cot,
    "draft_acceptance": draft_acceptance,
    "template_identity": template_identity,
}
assert tuple(PROBES) == PROBE_NAMES  # the wire schema names the same probes


#: What a probe needs the server to run with (vLLM's own flags): a server without it cannot
#: show the issue, and the probe is ``skipped``. Tool calls in answers need
#: ``--enable-auto-tool-choice`` and a ``--tool-call-parser`` (vLLM's tool calling docs:
#: https://docs.vllm.ai/en/latest/features/tool_calling.html); reasoning split from content
#: needs a ``--reasoning-parser`` (https://docs.vllm.ai/en/latest/features/reasoning_outputs.html).
REQUIRED_FLAGS: dict[str, tuple[str, ...]] = {
    "forced_tool_choice": ("--enable-auto-tool-choice", "--tool-call-parser"),
    "tool_continuation_cot": ("--reasoning-parser",),
}


def inapplicable(name: str, argv: list[str] | None) -> str | None:
    """Why probe ``name`` cannot apply to a server started with ``argv`` (None: it can, or
    the argv is unknown). Spellings as vLLM reads them (``_`` or ``-``, ``=value``)."""
    if argv is None:
        return None
    given = {word.split("=", 1)[0].replace("_", "-") for word in argv if word.startswith("--")}
    missing = [flag for flag in REQUIRED_FLAGS.get(name, ()) if flag not in given]
    if missing:
        return f"not applicable: the server runs without {' '.join(missing)}"
    return None


def run_probe(name: str, server: Server, argv: list[str] | None = None) -> dict[str, Any]:
    """Run one probe; returns ``{"name", "ran_at", "outcome", "evidence", "duration_ms"}``.
    ``argv``: the server's command line, for :func:`inapplicable` (None: not checked)."""
    started, ran_at = time.monotonic(), datetime.now(timezone.utc).isoformat()
    server.budget = _Budget(server.timeout_s)
    why_not = inapplicable(name, argv)
    if why_not is not None:
        outcome, evidence = "skipped", why_not
    elif server.model is None and name != "template_identity":
        outcome, evidence = "skipped", "no served model known (GET /v1/models failed)"
    else:
        try:
            outcome, evidence = PROBES[name](server)
        except (ProbeError, TimeoutError) as exc:
            outcome, evidence = "error", str(exc)
        except httpx.HTTPError as exc:
            outcome, evidence = "error", f"{type(exc).__name__}: {exc}"
    return {"name": name, "ran_at": ran_at, "outcome": outcome,
            "evidence": evidence[:min(EVIDENCE_CHARS, MAX_PROBE_EVIDENCE_CHARS)],
            "duration_ms": int((time.monotonic() - started) * 1000)}


def run_probes(base_url: str, model: str | None, names: list[str],
               api_key: str | None = None, timeout_s: float = PROBE_TIMEOUT_S,
               budget_s: float = PROBES_BUDGET_S, argv: list[str] | None = None
               ) -> list[dict[str, Any]]:
    """Run the known probes among ``names`` (unknown names are ignored) against ``base_url``:
    each within ``timeout_s`` and the last one's end, all within ``budget_s`` seconds;
    ``argv`` (the server's command line) marks inapplicable probes ``skipped``."""
    server = Server(base_url, model, api_key, timeout_s)
    end = time.monotonic() + budget_s
    out = []
    with make_client(base_url) as client:
        server.client = client
        for name in (n for n in PROBE_NAMES if n in names):
            left = end - time.monotonic()
            if left <= 0:
                out.append({"name": name, "ran_at": datetime.now(timezone.utc).isoformat(),
                            "outcome": "skipped", "duration_ms": 0,
                            "evidence": f"not run: the probes' {budget_s:g} s budget for "
                                        "this cycle was spent"})
                continue
            server.timeout_s = min(timeout_s, left)
            out.append(run_probe(name, server, argv))
    return out
