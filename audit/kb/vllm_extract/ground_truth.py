"""Shipped tables from the vLLM ground-truth JSON files (facts read from the wheels).

Used when the wheels themselves are not at hand: ``manage.py vllm_extract --ground-truth DIR
--out audit/kb/data/vllm``. Accepts the full files and the slim copies in
``tests/data/vllm-ground-truth`` (metrics nested under "metrics" or not).
"""

from __future__ import annotations

import json
from pathlib import Path

from audit.kb.vllm_extract.build import build_table


def _load(folder: Path, name: str) -> dict:
    path = folder / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"ground truth file missing: {path}")
    return json.loads(path.read_text())


def tables(folder: Path) -> dict[str, dict]:
    """{release: table} for every release in ``folder``'s flags.json.

    Raises FileNotFoundError when a file is missing, KeyError when a release lacks a part."""
    flags, batch = _load(folder, "flags"), _load(folder, "batch_defaults")
    metrics, spec = _load(folder, "metrics"), _load(folder, "spec_methods")
    provenance = batch.get("_provenance") or {}
    out = {}
    for release, rows in flags.items():
        block = metrics[release]
        block = block.get("metrics", block) if isinstance(block.get("metrics"), dict) else block
        prov = provenance.get(release) or {}
        out[release] = build_table(
            release, rows, batch[release], block, spec[release],
            provenance={"wheel": prov.get("wheel"), "sha256": prov.get("sha256"),
                        "read_by": "vLLM ground truth (wheel read with ast)"})
    return out


def write(folder: Path, out: Path) -> list[Path]:
    """Write one ``<release>.json`` per release into ``out``; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for release, table in tables(folder).items():
        path = out / f"{release}.json"
        path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written
