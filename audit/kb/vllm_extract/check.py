"""Developer check: does the extractor reproduce a shipped table? (not run by the tests:
it needs a ~400 MB wheel). ``python -m audit.kb.vllm_extract.check WHEEL [RELEASE]``.

Prints, per table part, how many entries differ between ``extract(WHEEL)`` built with
:func:`build.build_table` and ``audit/kb/data/vllm/<release>.json`` (metrics: names
missing or extra, type and labels); exit 1 when a part the
argv reader depends on (option spellings, negatives, takes, dest) or the batch table differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.vllm_extract.build import build_table
from audit.kb.vllm_extract.source import extract
from audit.kb.vllm_tables import table

_CRITICAL = ("spellings", "negative", "takes", "dest")


def compare(wheel: Path, release: str | None = None) -> dict[str, list]:
    """{part: [differences]} between the extractor's table and the shipped one."""
    facts = extract(wheel)
    release = release or facts["release"]
    shipped = table(release)
    mine = build_table(release, facts["flags"], facts["batch"], facts["metrics"],
                       facts["spec"], facts["provenance"], facts["config_keys"])
    out: dict[str, list] = {"missing options": sorted(set(shipped["options"])
                                                      - set(mine["options"])),
                            "extra options": sorted(set(mine["options"])
                                                    - set(shipped["options"]))}
    for flag in set(shipped["options"]) & set(mine["options"]):
        for key, value in shipped["options"][flag].items():
            if key != "config_keys" and mine["options"][flag].get(key) != value:
                out.setdefault(f"option {key}", []).append(
                    (flag, value, mine["options"][flag].get(key)))
    for part in ("batch_defaults", "config_defaults", "speculative"):
        if mine[part] != shipped[part]:
            out[part] = [mine[part]]
    out["metrics missing"] = sorted(set(shipped["metrics"]) - set(mine["metrics"]))
    out["metrics extra"] = sorted(set(mine["metrics"]) - set(shipped["metrics"]))
    for name in sorted(set(shipped["metrics"]) & set(mine["metrics"])):
        for key in ("type", "labels"):
            if mine["metrics"][name][key] != shipped["metrics"][name][key]:
                out.setdefault(f"metric {key}", []).append(
                    (name, shipped["metrics"][name][key], mine["metrics"][name][key]))
    return out


def main(argv: list[str]) -> int:
    diffs = compare(Path(argv[0]), argv[1] if len(argv) > 1 else None)
    failed = False
    for part, rows in sorted(diffs.items()):
        print(f"{part}: {len(rows)}")
        for row in rows[:8]:
            print(f"    {str(row)[:160]}")
        failed |= bool(rows) and (part.split(" ")[-1] in _CRITICAL
                                  or part in ("missing options", "batch_defaults"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
