"""Failed starts of speculative decoding whose draft model and target do not share a
vocabulary size.

Every vLLM generation checks that a separate draft model's vocab_size equals the target's,
because the draft's token ids are scored against the target's logits. Three forms of the
error, by release:

* V0's speculative worker (``vllm/spec_decode/spec_decode_worker.py``, quoted with its line in
  https://github.com/vllm-project/vllm/issues/5203): a bare ``assert all(vocab_sizes[0] ==
  vocab_size for vocab_size in vocab_sizes)`` whose source line the traceback prints before a
  message-less ``AssertionError`` (https://github.com/vllm-project/vllm/issues/14939);
* V0's sampler (``vllm/model_executor/layers/spec_decode_base_sampler.py``, in the 0.8.5
  raise-site table): ``AssertionError: draft_vocab_size=N target_vocab_size=M``;
* V1's speculative config (``vllm/config/speculative.py``, e.g. 0.20.0): "Target and draft
  model should have the same vocabulary size. Target model vocab_size=M. Draft model
  vocab_size=N."

The sizes differ even inside one model family: the embedding is padded per size (Qwen2-1.5B
151936, Qwen2-72B 152064, https://github.com/vllm-project/vllm/issues/7252), so "same
tokenizer" is not enough; config.json's ``vocab_size`` is what vLLM compares. Later releases
extend the check to EAGLE and MTP drafters (https://github.com/vllm-project/vllm/pull/34722).
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb.flags import parse_argv

_OLD_ASSERT = re.compile(r"vocab_sizes\[0\]\s*==\s*vocab_size")
_SAMPLER = re.compile(r"draft_vocab_size=(\d+)\s+target_vocab_size=(\d+)")
_CONFIG = re.compile(r"same vocabulary size\. Target model vocab_size=(\d+)\. "
                     r"Draft model vocab_size=(\d+)", re.I)


def _draft_setting(argv: list[str]) -> dict[str, Any]:
    """The option that names the draft (``--speculative-config`` or the older
    ``--speculative-model``) and its value, when the argv sets one."""
    values = parse_argv(argv).values
    for dest, flag in (("speculative_config", "--speculative-config"),
                       ("speculative_model", "--speculative-model")):
        if values.get(dest) not in (None, {}, ""):
            return {"setting": flag, "value": values[dest]}
    if any(str(t).startswith("--speculative-model") or str(t).startswith("--speculative_model")
           for t in argv):
        return {"setting": "--speculative-model"}
    return {}


def draft_vocab_mismatch(lines: list[str], argv: list[str]) -> dict[str, Any] | None:
    """Explanation fields for a start refused because draft and target vocab sizes differ."""
    for line in reversed(lines):
        sizes = None
        found = _SAMPLER.search(line)
        if found:
            sizes = (found.group(1), found.group(2))
        found = _CONFIG.search(line)
        if found:
            sizes = (found.group(2), found.group(1))
        if sizes is None and not _OLD_ASSERT.search(line):
            continue
        told = f" (draft {sizes[0]}, target {sizes[1]})" if sizes else ""
        return dict(
            kind="raise_site", error_line=line, **_draft_setting(argv),
            checked="vLLM's speculative decoding checks that the draft model's vocab_size "
            "(config.json) equals the target's, since draft tokens are scored against the "
            "target's logits",
            summary=f"the draft model's vocabulary size differs from the target's{told}; "
            "models of one family can differ only by the embedding padding of their size, "
            "which is enough for vLLM to refuse the pair",
            change="pick a draft whose config.json vocab_size equals the target's (same "
            "tokenizer and same padding), or speculate without a separate draft model "
            "(ngram, or an EAGLE/MTP head trained for this target)")
    return None
