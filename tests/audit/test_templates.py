"""audit.kb.templates: seed fingerprints match on prefix, suffix AND size."""

from __future__ import annotations

import pytest

from audit.kb.templates import match, template_context


def _sha(prefix: str, suffix: str) -> str:
    return prefix + "1" * (64 - len(prefix) - len(suffix)) + suffix


@pytest.mark.parametrize(("prefix", "suffix", "size", "identity"), [
    ("94899c0f", "25bff413", 16934, "frozen"),
    ("36e3a42e", "bead3f0", 17466, "intermediate"),
    ("ae53464b", "8de4c6d4", 18683, "vetted"),
])
def test_each_seed_template_is_recognised(prefix, suffix, size, identity) -> None:
    ctx = template_context({"sha256": _sha(prefix, suffix), "size_bytes": size, "source": "x"})
    assert ctx["identity"] == identity
    assert ctx["label"] and ctx["pulled"]


def test_the_vetted_template_carries_its_google_revision() -> None:
    ctx = template_context({"sha256": _sha("ae53464b", "8de4c6d4"), "size_bytes": 18683})
    assert ctx["revision"] == "68abe480"


def test_a_matching_prefix_and_suffix_with_another_size_is_unknown() -> None:
    ctx = template_context({"sha256": _sha("ae53464b", "8de4c6d4"), "size_bytes": 18684})
    assert ctx["identity"] == "unknown"


def test_a_matching_prefix_with_another_suffix_is_unknown() -> None:
    assert match(_sha("ae53464b", "00000000"), 18683) is None


def test_upper_case_hashes_match_too() -> None:
    assert match(_sha("94899c0f", "25bff413").upper(), 16934)["identity"] == "frozen"


def test_no_template_reported_gives_none_and_every_key() -> None:
    for value in (None, {}, {"source": "tokenizer_config.json", "sha256": None}):
        ctx = template_context(value)
        assert ctx["identity"] is None
        assert set(ctx) >= {"sha256", "size_bytes", "source", "identity", "label", "pulled"}
