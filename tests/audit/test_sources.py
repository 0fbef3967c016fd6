"""Rule references a user can read: seed files show as the recipe's title and section."""

from __future__ import annotations

import re

from django.template import Context, Template

from audit.kb.engine import load_rules
from audit.kb.sources import SEED_TITLES, describe, readable
from demo.paths import seeds_dir

REF = "seed:000_ffb301503ad246f2.txt#Pitfalls — things that have already burned a deploy once"


def test_a_seed_reference_reads_as_the_recipe_title_and_section() -> None:
    text = readable(REF)
    assert "seed:" not in text and ".txt" not in text
    assert text.startswith("Recipe \u201cGemma 4 31B on vLLM")
    assert text.endswith("section \u201cPitfalls — things that have already burned a deploy "
                         "once\u201d")


def test_a_url_stays_a_link_named_by_its_issue_number() -> None:
    url = "https://github.com/vllm-project/vllm/issues/1"
    assert describe(url) == ("vllm issue #1", url)


def test_every_seed_the_rules_cite_has_a_title_and_is_in_the_repository() -> None:
    cited = {ref[5:].partition("#")[0] for rule in load_rules().rules
             for ref in rule.references if ref.startswith("seed:")}
    assert cited and cited <= set(SEED_TITLES)
    assert set(SEED_TITLES) <= {p.name for p in seeds_dir().glob("*.txt")}


def test_every_cited_seed_section_is_a_heading_of_that_recipe() -> None:
    missing = []
    for rule in load_rules().rules:
        for ref in rule.references:
            name, _, section = ref.removeprefix("seed:").partition("#")
            if not ref.startswith("seed:") or not section:
                continue
            text = (seeds_dir() / name).read_text()
            headings = {re.sub(r"^#+\s*", "", line).replace("`", "").strip()
                        for line in text.splitlines()}
            if not any(section.strip() in h for h in headings) and section not in text:
                missing.append((rule.id, ref))
    assert missing == []


def test_the_page_filter_renders_no_seed_file_name() -> None:
    html = Template("{% load audit_tags %}{{ r|reference }}").render(Context({"r": REF}))
    assert "seed:" not in html and "Gemma 4 31B on vLLM" in html
    link = Template("{% load audit_tags %}{{ r|reference }}").render(
        Context({"r": "https://example.com/<x>"}))
    assert link.startswith('<a href="https://example.com/&lt;x&gt;"')
