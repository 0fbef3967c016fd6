"""``manage.py vllm_extract``: write vLLM release tables (developer tool, never run by tests
on a real wheel).

* ``vllm_extract WHEEL_OR_SRC_DIR [...] --out audit/kb/data/vllm`` reads each wheel or
  unpacked source tree statically (``ast``; vLLM is never imported) and writes
  ``<release>.json`` (release from ``vllm/_version.py``, or ``--release``).
  and ``capabilities/<release>.json`` (:mod:`audit.kb.vllm_extract.capabilities`: model
  architectures, quantization methods, attention backends, MoE kernels, parsers); ``--only
  table`` / ``--only capabilities`` writes one of the two.
* ``vllm_extract --ground-truth DIR --out audit/kb/data/vllm`` converts the ground-truth
  JSON files (one table per release in them).

Check a new table with ``python -m audit.kb.vllm_extract.check WHEEL`` before committing.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.vllm_extract import ground_truth
from audit.kb.vllm_extract.build import build_table
from audit.kb.vllm_extract.capabilities import extract_capabilities
from audit.kb.vllm_extract.source import extract


class Command(BaseCommand):
    """Extract per-release vLLM tables from wheels, source trees or the ground truth."""

    help = "Write audit/kb/data/vllm/<release>.json from vLLM wheels or source trees."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("sources", nargs="*", help="vLLM wheels or unpacked source dirs")
        parser.add_argument("--out", required=True, help="folder for <release>.json")
        parser.add_argument("--release", default=None, help="release name (one source only)")
        parser.add_argument("--ground-truth", default=None, help="ground-truth JSON folder")
        parser.add_argument("--only", choices=("table", "capabilities"), default=None,
                            help="write only the option table or only the capabilities")

    def handle(self, *args: Any, **options: Any) -> None:
        out = Path(options["out"])
        try:
            if options["ground_truth"]:
                for path in ground_truth.write(Path(options["ground_truth"]), out):
                    self.stdout.write(f"wrote {path}")
            for source in options["sources"]:
                if options["only"] != "capabilities":
                    path = write_source(Path(source), out, options["release"])
                    self.stdout.write(f"wrote {path}")
                if options["only"] != "table":
                    path = write_capabilities(Path(source), out, options["release"])
                    self.stdout.write(f"wrote {path}")
        except (FileNotFoundError, KeyError, ValueError) as exc:
            self.stderr.write(f"vllm_extract: {exc}")
            sys.exit(2)


def write_source(source: Path, out: Path, release: str | None = None) -> Path:
    """Extract one wheel / source tree into ``out/<release>.json``; returns the path.
    Raises ValueError when the release cannot be named."""
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
