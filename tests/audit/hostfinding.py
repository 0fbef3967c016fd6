"""One rule's finding on a host report built with tests/recommend/rkit.py.

Shared by the rule tests that build a whole agent report rather than a hand-built context
(ctxfactory.py): ``finding(rule_id, gpu, argv, version)`` builds one host of ``count`` x
``gpu`` running ``argv`` on vLLM ``version``, lets the caller's keyword facts overwrite the
server entry, and returns that rule's finding, or None when it stays quiet.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from audit.kb.context import build_context
from audit.kb.engine import KnowledgeBase, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import host_report  # noqa: E402

KB = load_rules()


def finding(rule_id: str, gpu: str, argv: list[str], version: str | None, *, count: int = 1,
            env: dict[str, str] | None = None, config: dict[str, Any] | None = None,
            errors: list[str] | None = None, models: list[dict[str, Any]] | None = None,
            kb: KnowledgeBase = KB):
    """``rule_id``'s finding, or None. ``version`` None: the agent reported no version (the
    report is built on 0.9.2, then both version fields are emptied). ``env``: the server's
    environment; ``config``: the model's config.json as read from the HF cache; ``errors``:
    the agent's errors; ``models``: what GET /v1/models answered. Each replaces the entry's
    own only when given."""
    report = host_report(gpu, count, argv, version=version or "0.9.2", template=None)
    server = report["servers"][0]
    if version is None:
        server["vllm_version"] = server["installed_vllm_version"] = None
    if env:
        server["env"] = env
    if config:
        server["model_files"] = {"source": f"hf-cache:{argv[2]}@{'0' * 40}",
                                 "config": config, "weights_bytes": None, "errors": []}
    if errors is not None:
        server["errors"] = list(errors)
    if models is not None:
        server["models"] = models
    return next((f for f in kb.evaluate(build_context(server, report))
                 if f.rule_id == rule_id), None)
