"""``python -m audit.kb.vllm_extract SOURCE [...] --out DIR [--release X]``: write release
tables (options, and ``capabilities/<release>.json``) from vLLM wheels, unpacked source
trees or an installed ``site-packages`` (any folder holding ``vllm/``), without Django
(``manage.py vllm_extract`` is the same plus ``--ground-truth``). Exit 2 with the reason on
stderr when a source holds no vLLM sources or its release cannot be named.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

from audit.kb.vllm_extract.build import build_table
from audit.kb.vllm_extract.capabilities import extract_capabilities
from audit.kb.vllm_extract.source import extract


def write_source(source: Path, out: Path, release: str | None = None) -> Path:
    """Extract one wheel / source tree into ``out/<release>.json``; returns the path.
    Raises ValueError when the release cannot be named, FileNotFoundError without sources."""
    facts = extract(source)
    name = release or facts["release"]
    if not name:
        raise ValueError(f"{source}: no vllm/_version.py; pass --release")
    table = build_table(name, facts["flags"], facts["batch"], facts["metrics"], facts["spec"],
                        facts["provenance"], facts["config_keys"])
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return path


def write_capabilities(source: Path, out: Path, release: str | None = None) -> Path:
    """``out/capabilities/<release>.json`` from one wheel / source tree; returns the path.
    Raises ValueError when the release cannot be named."""
    facts = extract_capabilities(source)
    name = release or facts["release"]
    if not name:
        raise ValueError(f"{source}: no vllm/_version.py; pass --release")
    facts["release"] = name
    built = _built(source)
    if built:
        facts["provenance"]["built"] = built
    folder = out / "capabilities"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(facts, indent=1, sort_keys=True, default=str) + "\n")
    return path


def _built(source: Path) -> str | None:
    """The day a wheel was built (its ``vllm/_version.py`` zip timestamp, ISO), the release
    date the fixes index maps merge days with; None for a source directory."""
    if not (source.is_file() and zipfile.is_zipfile(source)):
        return None
    with zipfile.ZipFile(source) as wheel:
        try:
            stamp = wheel.getinfo("vllm/_version.py").date_time
        except KeyError:
            return None
    return f"{stamp[0]:04d}-{stamp[1]:02d}-{stamp[2]:02d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.kb.vllm_extract")
    parser.add_argument("sources", nargs="+", help="vLLM wheels, source dirs or site-packages")
    parser.add_argument("--out", required=True, help="folder for <release>.json")
    parser.add_argument("--release", default=None, help="release name (one source only)")
    args = parser.parse_args(argv)
    try:
        for source in args.sources:
            print(f"wrote {write_source(Path(source), Path(args.out), args.release)}")
            print(f"wrote {write_capabilities(Path(source), Path(args.out), args.release)}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"vllm_extract: {exc}", file=sys.stderr)
        return 2
    return 0
