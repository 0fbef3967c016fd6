"""Whether a server is seen serving, and the rule field that honours it (``predicts``).

A rule whose claim is that the server fails to start (the weights or the KV cache do not
fit, vLLM refuses the command at start-up, the model class is missing) is refuted by a
server that answers: a process that started with this command line and serves requests got
past every start-up check. Such a rule says ``predicts: startup_failure`` and the engine
drops its finding on a server seen serving (:func:`refuted`), so a dashboard never shows a
critical "does not start" beside a server that is running. The same rule still fires, at its
severity, on a server not seen serving and on a failed start's command line.

Evidence of serving (:func:`serving_evidence`), each from the report the agent sent:

* ``metrics``: the /metrics scrape answered (``metrics.available``);
* ``models``: GET /v1/models answered with at least one model card (the API server is up,
  and vLLM starts it only after the engine's start-up checks and memory profiling);
* ``probes``: a live probe got an answer from the server (``confirmed`` /
  ``not_reproduced``).
"""

from __future__ import annotations

from typing import Any

#: ``predicts`` values a rule may carry, and what each claims.
PREDICTS = frozenset({"startup_failure"})
#: Probe outcomes that mean the server answered the probe's request.
ANSWERED = frozenset({"confirmed", "not_reproduced"})


def serving_evidence(server: dict[str, Any], metrics: dict[str, Any],
                     probes: dict[str, Any]) -> list[str]:
    """What in the report shows this server serving (empty: not seen serving)."""
    out = []
    if metrics.get("available") is True:
        out.append("metrics")
    if any(isinstance(card, dict) and card.get("id") for card in server.get("models") or []):
        out.append("models")
    if any(isinstance(p, dict) and p.get("outcome") in ANSWERED for p in probes.values()):
        out.append("probes")
    return out


def parse_predicts(raw: Any) -> str | None:
    """``predicts`` of a raw rule: None or one of :data:`PREDICTS`; raises ValueError."""
    if raw is None or raw in PREDICTS:
        return raw
    raise ValueError(f"predicts: expected one of {sorted(PREDICTS)}")


def refuted(predicts: str | None, ctx: dict[str, Any]) -> bool:
    """A start-up failure predicted for a server the report shows serving did not happen."""
    return predicts == "startup_failure" and (ctx.get("server") or {}).get("serving") is True
