"""Recommended vLLM configuration per server. Pure Python, no Django.

Entry points: :func:`recommend_report` and :func:`recommend_server` (advice.recommend.core);
:func:`cli_json` projects a result onto the ``manage.py recommend`` JSON shape.
"""

from __future__ import annotations

from typing import Any

from advice.recommend.core import recommend_report, recommend_server
from audit.kb.perf.calibrate import fleet

CLI_DIFF_KEYS = ("flag", "current", "recommended", "reason", "references")


def cli_json(result: dict[str, Any]) -> dict[str, Any]:
    """``{"servers": [{"pid", "layout", "replicas": [{"argv", "gpus"}], "diff": [{"flag",
    "current", "recommended", "reason", "references"}], "notes", "prediction"}],
    "calibration": {"servers", "median_ratio", "spread"}}`` from :func:`recommend_report`'s
    result; ``prediction`` as :func:`advice.perfmodel.predict_commands` returns it (curve
    left out), ``calibration`` the model-vs-server ratio across the report's servers."""
    servers = []
    for item in result["servers"]:
        servers.append({
            "pid": item["pid"], "layout": item["layout"],
            "replicas": [{"argv": r["argv"], "gpus": r["gpus"]} for r in item["replicas"]],
            "diff": [{k: row[k] for k in CLI_DIFF_KEYS} for row in item["diff"]],
            "notes": list(item["notes"]),
            "prediction": {k: v for k, v in item["prediction"].items() if k != "curve"},
        })
    ratios = [(item["prediction"].get("calibration") or {}).get("ratio")
              for item in result["servers"]]
    return {"servers": servers, "calibration": fleet([r for r in ratios if r])}


__all__ = ["cli_json", "recommend_report", "recommend_server"]
