"""``manage.py explain_argv``: what a vLLM release makes of a command line.

``explain_argv --vllm-version X [--gpu-name NAME --gpu-memory-gib N --gpu-count N]
[--format json|text] -- ARGV...`` or ``explain_argv --batch FILE`` (a JSON list of
``{"vllm_version", "gpu": {...} | null, "argv": [...]}``; prints a JSON list of answers).
Output shape: :mod:`audit.kb.explain`. Bad input: exit 2 with the field path, never a trace.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.explain import ExplainError, explain, explain_batch, to_json, to_text


class Command(BaseCommand):
    """Explain a vLLM command line with the defaults of its release and GPU class."""

    help = "Print what a vLLM release makes of a command line (settings, sources, refusals)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("argv", nargs="*", help="the command line, after --")
        parser.add_argument("--vllm-version", default=None)
        parser.add_argument("--gpu-name", default=None)
        parser.add_argument("--gpu-memory-gib", type=float, default=None)
        parser.add_argument("--gpu-count", type=int, default=1)
        parser.add_argument("--format", choices=("json", "text"), default="json")
        parser.add_argument("--batch", default=None, help="JSON file of command lines")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["batch"]:
                items = json.loads(Path(options["batch"]).read_text())
                self.stdout.write(to_json(explain_batch(items)))
                return
            gpu = None
            if options["gpu_name"] or options["gpu_memory_gib"] is not None:
                gpu = {"name": options["gpu_name"], "memory_gib": options["gpu_memory_gib"],
                       "count": options["gpu_count"]}
            answer = explain(options["vllm_version"], gpu, list(options["argv"]))
        except (ExplainError, OSError, ValueError) as exc:
            self.stderr.write(f"explain_argv: {exc}")
            sys.exit(2)
        self.stdout.write(to_json(answer) if options["format"] == "json"
                          else to_text(answer, list(options["argv"])))
