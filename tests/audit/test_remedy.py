"""One remedy per failed start (audit.remedy): the release that ran pinned exactly, with the
dependency pin when a dependency is the cause; else the fixed release the KB verified."""

from __future__ import annotations

from types import SimpleNamespace

from audit.remedy import dependency_pin, remedy

TRANSFORMERS = SimpleNamespace(
    id="dep-crash", fixed_in="0.28.0",
    remediation="Upgrade to >= 0.28.0 or pin transformers==5.14.1 (the import breaks).")


def test_a_crash_after_an_upgrade_rolls_back_to_the_release_that_ran_with_the_pin() -> None:
    out = remedy(ran="0.25.1", installed="0.27.1", image=None, rules=[TRANSFORMERS],
                 verified_through="0.33.0")
    assert out["kind"] == "pin_back" and out["release"] == "0.25.1"
    assert out["command"] == "pip install vllm==0.25.1 transformers==5.14.1"
    assert "0.28.0" not in out["text"]  # one answer, not two
    container = remedy(ran="0.25.1", installed="0.27.1", image="vllm/vllm-openai:v0.27.1",
                       rules=[TRANSFORMERS], verified_through="0.33.0")
    assert container["command"].startswith("run the image vllm/vllm-openai:v0.25.1")


def test_without_an_upgrade_the_fixed_release_when_the_kb_verified_it() -> None:
    out = remedy(ran="0.27.1", installed="0.27.1", image=None, rules=[TRANSFORMERS],
                 verified_through="0.33.0")
    assert out["kind"] == "fixed_release" and out["command"] == "pip install vllm==0.28.0"
    unverified = remedy(ran="0.27.1", installed="0.27.1", image=None, rules=[TRANSFORMERS],
                        verified_through="0.27.1")
    assert unverified["kind"] == "rule" and unverified["release"] is None
    assert "transformers==5.14.1" in unverified["text"]


def test_the_dependency_pin_is_never_vllm_itself() -> None:
    assert dependency_pin("pip install vllm==0.25.1 and numpy==1.26.4.") == "numpy==1.26.4"
    assert dependency_pin("roll back") is None
