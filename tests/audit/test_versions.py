"""audit.kb.versions: every version form an agent can report maps to one PEP 440 version."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from audit.kb.versions import parse_version, release_for_date


@pytest.mark.parametrize(("raw", "expected"), [
    ("0.25.1", "0.25.1"),
    ("v0.26.0", "0.26.0"),
    ("vllm/vllm-openai:v0.27.0", "0.27.0"),
    ("vllm/vllm-openai:v0.27.0@sha256:e414712fdc04", "0.27.0"),
    ("0.6.4.post1", "0.6.4.post1"),
    ("0.13", "0.13"),
    ("v0.22.0+cu129", "0.22.0"),
    ("vllm/vllm-openai:v0.22.0-cu129", "0.22.0"),
])
def test_it_normalises_release_forms(raw: str, expected: str) -> None:
    info = parse_version(raw)
    assert info.version == expected
    assert info.is_nightly is False
    assert raw in info.raw


def test_it_keeps_dev_builds_inside_release_ranges_and_explains_the_local_label() -> None:
    info = parse_version("0.29.1rc1.dev339+gda9888462")
    assert info.version == "0.29.1rc1.dev339"
    assert info.is_prerelease is True
    assert "gda9888462" in info.note
    assert SpecifierSet(">=0.29.0,<=0.30.0", prereleases=True).contains(info.version)


def test_it_reads_the_gemma4_preview_dev_build() -> None:
    info = parse_version("0.20.2rc1.dev49+g9b4e83934")
    assert info.version == "0.20.2rc1.dev49"
    assert not SpecifierSet(">=0.21.0", prereleases=True).contains(info.version)


def test_it_maps_a_dated_nightly_to_the_line_after_the_last_release() -> None:
    info = parse_version("nightly-2026-08-15")
    assert info.is_nightly is True
    assert info.version == "0.27.2.dev0"
    assert "0.27.1" in info.note
    assert SpecifierSet(">=0.26.0,<=0.30.0", prereleases=True).contains(info.version)


def test_it_maps_a_compact_date_nightly_tag_in_an_image_reference() -> None:
    info = parse_version("vllm/vllm-openai:nightly-20260920")
    assert info.version == "0.29.1.dev0"
    assert info.is_nightly is True


@pytest.mark.parametrize("raw", ["vllm/vllm-openai:cu130-nightly", "nightly-aarch64",
                                 "vllm/vllm-openai:nightly"])
def test_it_reports_an_undated_nightly_as_unknown_but_nightly(raw: str) -> None:
    info = parse_version(raw)
    assert info.version is None
    assert info.is_nightly is True
    assert "undated" in info.note


def test_it_maps_a_preview_image_by_its_embedded_month_and_day() -> None:
    info = parse_version("vllm/vllm-openai:gemma4-0505-cu130")
    assert info.version == "0.20.1.dev0"  # 2026-05-05 is after 0.20.0 and before 0.20.2
    assert info.is_prerelease is True and info.is_nightly is False
    assert "2026-05-05" in info.note and "2026 assumed" in info.note


@pytest.mark.parametrize("raw", ["latest", "vllm/vllm-openai:latest", None, ""])
def test_it_says_unknown_for_floating_tags_and_missing_versions(raw: str | None) -> None:
    info = parse_version(raw)
    assert info.version is None
    assert info.note


def test_it_returns_none_for_a_date_before_the_release_timeline() -> None:
    from datetime import date

    assert release_for_date(date(2025, 1, 1)) is None
    assert release_for_date(date(2026, 9, 23))[0] == "0.30.0"
    assert parse_version("nightly-2025-01-01").version is None


def test_it_never_raises_on_garbage() -> None:
    for raw in ["???", "vllm", "v", "nightly-2026-02-31", "0..1", "x" * 500]:
        info = parse_version(raw)
        assert info.raw == raw


@pytest.mark.parametrize(("raw", "table"), [
    ("0.29.1rc1.dev339+gda9888462", "0.29.0"),
    ("vllm/vllm-openai:v0.29.1", "0.29.0"),
    ("v0.30.0rc2", "0.29.0"),            # a 0.30.0 release candidate is not 0.30.0 yet
    ("0.33.0+cu129", "0.33.0"),
    ("0.34.2.dev12", "0.33.0"),          # newer than every table: the newest
    ("0.11.0.post1", "0.11.0"),
    ("0.12.0", "0.11.0"),                # no 0.12 table: nearest below
    ("nightly-2026-07-20", "0.24.0"),    # after 0.24.0, before 0.25.1 (release timeline)
])
def test_every_reported_version_maps_to_the_nearest_known_release_at_or_below(raw, table):
    from audit.kb.vllm_tables import table_release
    info = parse_version(raw)
    release, note = table_release(info.version)
    assert release == table
    assert f"rules and defaults of {table}" in note


def test_a_nightly_named_by_commit_is_unknown_not_dated_by_its_digits() -> None:
    from audit.kb.vllm_tables import releases, table_release
    info = parse_version("vllm/vllm-openai:nightly-4ba787ec1203")
    assert info.version is None and info.is_nightly
    assert table_release(info.version)[0] == releases()[-1]
