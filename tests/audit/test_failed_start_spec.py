"""Failed starts of speculative decoding whose draft and target vocabularies differ
(audit/kb/failed_start_spec.py), in each release's words; every report is built here."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

OLD = ["vllm", "serve", "Qwen/Qwen2-72B-Instruct", "--speculative-model",
       "Qwen/Qwen2-1.5B-Instruct", "--num-speculative-tokens", "5"]
NEW = ["vllm", "serve", "Qwen/Qwen2-72B-Instruct", "--speculative-config",
       '{"method": "draft_model", "model": "Qwen/Qwen2-1.5B-Instruct", '
       '"num_speculative_tokens": 5}']


def _explain(lines: list[str], version: str, argv: list[str]):
    gpus = casekit._gpus([{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80, "count": 4}], "s")
    report = casekit.report_skeleton("spec", gpus)
    failed = casekit.failed_start_of("1", argv, None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], version, facts=facts_of(report, failed))


def test_v0_bare_assert_with_its_source_line_is_the_vocab_mismatch() -> None:
    lines = ["    assert all(vocab_sizes[0] == vocab_size for vocab_size in vocab_sizes)",
             "AssertionError"]
    out = _explain(lines, "0.5.0", OLD)
    assert out.setting == "--speculative-model"
    assert "vocabulary size differs" in out.summary and "config.json vocab_size" in out.change


def test_the_sampler_assert_gives_both_sizes_and_no_upgrade_advice() -> None:
    out = _explain(["AssertionError: draft_vocab_size=151936 target_vocab_size=152064"],
                   "0.8.5", OLD)
    assert "(draft 151936, target 152064)" in out.summary
    assert "where this check is gone" not in (out.change or "")


def test_the_v1_config_error_reads_target_and_draft_the_right_way_round() -> None:
    line = ("ValueError: Target and draft model should have the same vocabulary size. Target "
            "model vocab_size=152064. Draft model vocab_size=151936. Using models with different "
            "tokenizers can cause out-of-bound errors during speculative decoding.")
    out = _explain([line], "0.20.0", NEW)
    assert out.setting == "--speculative-config"
    assert "(draft 151936, target 152064)" in out.summary and "ngram" in out.change


def test_a_bare_assertion_without_the_vocab_line_is_not_read_as_a_vocab_mismatch() -> None:
    out = _explain(["AssertionError"], "0.5.0", OLD)
    assert "vocabulary" not in out.summary
