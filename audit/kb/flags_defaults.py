"""What the per-release vLLM tables (audit/kb/data/vllm, read by :mod:`audit.kb.vllm_tables`)
cannot say, kept by hand: ``REMOVED_FLAGS`` gives sourced replacement advice for removed
flags (a table knows that a flag is gone, not what replaces it or why), ``SECRET_FLAGS``
names secret-valued options (a table has no notion of a secret). Which flags a release
accepts, their spellings, types, defaults and boolean forms come from the release tables
only (the recommended command is written with them: advice/recommend/plan.py).
"""

from __future__ import annotations

# Flags whose value is a secret: never echoed into evidence verbatim.
SECRET_FLAGS = frozenset({"api_key", "hf_token"})

# Flags removed from vLLM: (flag, removed in, replacement, source). Only rows with a source.
REMOVED_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("enable_reasoning", "0.10.0", "--reasoning-parser alone",
     "deprecated by https://github.com/vllm-project/vllm/pull/17452 (v0.9.0, "
     "https://github.com/vllm-project/vllm/pull/18404); 'unrecognized arguments' on 0.10.0 "
     "in https://github.com/vllm-project/vllm/issues/18538"),
    ("disable_log_requests", "0.11.0", "--enable-log-requests (logging is off by default)",
     "https://github.com/vllm-project/vllm/pull/21739; removed for 0.11+ per "
     "https://github.com/opendatahub-io/kserve/pull/1005"),
    ("swap_space", "0.18.0", "nothing (V1 never allocates CPU swap)",
     "https://github.com/vllm-project/vllm/pull/36216 (2026-03-06); absent from EngineArgs "
     "0.18.0-0.29.0 per https://github.com/unslothai/unsloth-zoo/issues/1210"),
)
