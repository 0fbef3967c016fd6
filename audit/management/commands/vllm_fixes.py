"""``manage.py vllm_fixes``: build or extend the fixes index (developer tool).

* ``vllm_fixes --seed audit/kb/vllm_extract/fixes_seed.json`` rewrites
  ``audit/kb/data/vllm_fixes.json`` from the seed (PRs read in their GitHub threads): each
  entry's tags are :func:`audit.kb.fixes.tag` of its title and files, plus the hand tags the
  seed gives (``arch``/``gpu``/``parser``... keys, from the thread).
* ``vllm_fixes --release v0.34.0`` adds the fix PRs of that release's notes through GitHub's
  REST API (:mod:`audit.kb.fixes_live`; ``GITHUB_TOKEN`` raises the rate limit).

The index ships in the repo and in the signed KB bundle (``manage.py kb_bundle`` packs
``audit/kb/data`` whole).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from audit.kb.fixes import SCOPES, SUBJECTS, tag
from audit.kb.paths import BUILTIN_DATA_DIR

INDEX = BUILTIN_DATA_DIR / "vllm_fixes.json"


def from_seed(seed: dict[str, Any]) -> list[dict[str, Any]]:
    """Index entries from the seed (module docstring), sorted by number."""
    entries = []
    for row in seed["fixes"]:
        features = tag(row["title"], row.get("files"))
        for key in SUBJECTS + SCOPES:
            if row.get(key):
                features[key] = sorted(set(features.get(key, [])) | set(row[key]))
        entries.append({
            "number": row["number"], "title": row["title"],
            "url": f"https://github.com/vllm-project/vllm/pull/{row['number']}",
            "date": row["date"], "date_kind": row["date_kind"],
            "source": "PR thread (search of the vLLM tracker)", "features": features})
    return sorted(entries, key=lambda e: e["number"])


def write(entries: list[dict[str, Any]], path: Path = INDEX) -> Path:
    path.write_text(json.dumps({"format": 1, "fixes": entries}, indent=1, sort_keys=True)
                    + "\n", encoding="utf-8")
    return path


class Command(BaseCommand):
    """Build the fixes index from the seed, or add a release's fixes from GitHub."""

    help = "Write audit/kb/data/vllm_fixes.json (bug fixes by release, tagged by feature)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--seed", default=None, help="seed JSON (PRs read in threads)")
        parser.add_argument("--release", default=None, help="release tag to read from GitHub")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["seed"]:
            entries = from_seed(json.loads(Path(options["seed"]).read_text()))
            self.stdout.write(f"wrote {write(entries)} ({len(entries)} fixes)")
        if options["release"]:
            from audit.kb.fixes_live import release_fixes
            from audit.upstream import _client, _Stop
            current = json.loads(INDEX.read_text())["fixes"]
            try:
                with _client() as client:
                    added = release_fixes(client, options["release"])
            except _Stop as stop:
                self.stderr.write(f"vllm_fixes: stopped: {stop}")
                sys.exit(2)
            known = {e["number"] for e in current}
            merged = current + [e for e in added if e["number"] not in known]
            self.stdout.write(f"wrote {write(sorted(merged, key=lambda e: e['number']))} "
                              f"(+{len(merged) - len(current)} fixes)")
