"""``probes`` context block: the last live-probe result of each probe on a server.

The agent runs a probe only when an operator asked for it, then keeps sending the last result
with every report of that server (``servers[].probes``, ``fleet_agent/probes.py``). Each
result carries the ``vllm_version`` and ``template_sha256`` it was measured on; a result taken
on another version or chat template no longer describes the server and is re-armed here
(outcome ``none``, ``stale`` true), so an upgrade or a template change returns the advisory to
its unprobed severity until the probes run again.

Shape: ``{<probe name>: {"outcome": "confirmed"|"not_reproduced"|"error"|"skipped"|"none",
"at": RFC 3339 string or null, "evidence": string, "stale": bool, "summary": string}}``;
``summary`` is the sentence findings append ("Confirmed on this server (2026-12-01): ...").
"""

from __future__ import annotations

from typing import Any

from fleet_agent.schema import PROBE_NAMES

#: Evidence characters quoted in a finding's message.
SUMMARY_EVIDENCE_CHARS = 160


def _empty() -> dict[str, Any]:
    return {"outcome": "none", "at": None, "evidence": "", "stale": False, "summary": ""}


def summary(outcome: str, at: str | None, evidence: str) -> str:
    """The sentence a finding's message carries for one probe result ("" when unprobed)."""
    day = (at or "")[:10]
    if outcome == "confirmed":
        return (f"Confirmed on this server by a live probe ({day}): "
                f"{evidence[:SUMMARY_EVIDENCE_CHARS]}")
    if outcome == "not_reproduced":
        return f"Not reproduced on this server by a live probe ({day})."
    return ""


def probes_block(server: dict[str, Any]) -> dict[str, Any]:
    """``probes`` context of one report server entry (see the module docstring)."""
    block = {name: _empty() for name in PROBE_NAMES}
    version = server.get("vllm_version")
    template = (server.get("chat_template") or {}).get("sha256")
    for result in server.get("probes") or []:
        name = result.get("name") if isinstance(result, dict) else None
        if name not in block:
            continue
        stale = bool((result.get("vllm_version") and result.get("vllm_version") != version)
                     or (result.get("template_sha256")
                         and result.get("template_sha256") != template))
        outcome = "none" if stale else str(result.get("outcome") or "none")
        at, evidence = result.get("ran_at"), str(result.get("evidence") or "")
        block[name] = {"outcome": outcome, "at": at, "evidence": evidence, "stale": stale,
                       "summary": summary(outcome, at, evidence)}
    return block
