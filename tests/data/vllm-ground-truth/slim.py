"""Rebuild this folder's slim copies from the full ground-truth files (developer script).

Usage: ``python tests/data/vllm-ground-truth/slim.py FULL_DIR`` where FULL_DIR holds the full
``flags.json``, ``batch_defaults.json``, ``metrics.json``, ``spec_methods.json`` and
``changes.json`` read from vLLM's wheels. It drops only prose and provenance the tests do not
read (help text, source file names, full function sources, metric documentation) so the copy
stays small; every fact the tests compare against is kept as it was.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAG_KEYS = ("dest", "type", "default", "deprecated", "aliases", "negative_forms", "choices",
             "nargs", "action", "const", "config_field")
METRIC_KEYS = ("type", "labels", "exposed_as", "scope", "default_exported", "conditions",
               "hidden_unless_show_hidden_metrics")


def _flag(record: dict) -> dict:
    out = {k: record[k] for k in FLAG_KEYS if k in record}
    if "ClassRef" in str(out.get("action")):  # repr of the extraction script's own object
        out["action"] = "custom"
    return out


def main(full: Path) -> None:
    flags = json.loads((full / "flags.json").read_text())
    slim_flags = {v: {f: _flag(r) for f, r in rows.items()} for v, rows in flags.items()}
    batch = json.loads((full / "batch_defaults.json").read_text())
    batch.pop("_function_sources", None)
    metrics = json.loads((full / "metrics.json").read_text())
    slim_metrics = {v: {n: {k: m[k] for k in METRIC_KEYS if k in m}
                        for n, m in block["metrics"].items()} for v, block in metrics.items()}
    spec = json.loads((full / "spec_methods.json").read_text())
    slim_spec = {v: {"methods": s["methods"], "fields": sorted(s.get("fields") or {})}
                 for v, s in spec.items()}
    outputs = {"flags.json": slim_flags, "batch_defaults.json": batch,
               "metrics.json": slim_metrics, "spec_methods.json": slim_spec,
               "changes.json": json.loads((full / "changes.json").read_text())}
    for name, data in outputs.items():
        (HERE / name).write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
