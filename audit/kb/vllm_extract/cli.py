"""``python -m audit.kb.vllm_extract SOURCE [...] --out DIR [--release X]``: write release
tables from vLLM wheels, unpacked source trees or an installed ``site-packages`` (any folder
holding ``vllm/``), without Django (``manage.py vllm_extract`` is the same plus
``--ground-truth``). Exit 2 with the reason on stderr when a source holds no vLLM sources or
its release cannot be named.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from audit.kb.vllm_extract.build import build_table
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.kb.vllm_extract")
    parser.add_argument("sources", nargs="+", help="vLLM wheels, source dirs or site-packages")
    parser.add_argument("--out", required=True, help="folder for <release>.json")
    parser.add_argument("--release", default=None, help="release name (one source only)")
    args = parser.parse_args(argv)
    try:
        for source in args.sources:
            print(f"wrote {write_source(Path(source), Path(args.out), args.release)}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"vllm_extract: {exc}", file=sys.stderr)
        return 2
    return 0
