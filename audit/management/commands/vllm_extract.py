"""``manage.py vllm_extract``: write vLLM release tables (developer tool, never run by tests
on a real wheel).

* ``vllm_extract WHEEL_OR_SRC_DIR [...] --out audit/kb/data/vllm`` reads each wheel,
  unpacked source tree or installed ``site-packages`` statically (``ast``; vLLM is never
  imported) and writes
  ``<release>.json`` (release from ``vllm/_version.py``, or ``--release``).
  and ``capabilities/<release>.json`` (:mod:`audit.kb.vllm_extract.capabilities`: model
  architectures, quantization methods, attention backends, MoE kernels, parsers); ``--only
  table`` / ``--only capabilities`` writes one of the two.
* ``vllm_extract --ground-truth DIR --out audit/kb/data/vllm`` converts the ground-truth
  JSON files (one table per release in them).

Check a new table with ``python -m audit.kb.vllm_extract.check WHEEL`` before committing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.vllm_extract import ground_truth
from audit.kb.vllm_extract.cli import write_capabilities, write_source


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

