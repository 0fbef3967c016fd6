"""vLLM's start-up raise sites as data (audit.kb.vllm_extract.raise_sites → data/vllm/
raise_sites/<release>.json.gz), and the extractor run on sources in the repo.

The shipped files were extracted from the 19 wheels (0.8.5 → 0.33.0) with the command in
docs/knowledge-base.md; ``python -m audit.kb.vllm_extract.raise_sites --check DIR WHEEL…``
re-extracts and compares them (count and every site). CI has no wheels: here the extractor
runs on small source trees written below, one per source layout vLLM used (a single
``vllm/config.py`` up to 0.10, the ``vllm/config/`` package after, 0.32's
``entrypoints/launchers``), each using the message forms vLLM's code uses (f-string,
``.format``, ``%``, a message bound to a name first, ``assert``, ``parser.error``).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from audit.kb import raise_sites as rs
from audit.kb.vllm_extract.raise_sites import extract_sites
from audit.kb.vllm_tables import releases

SITES_DIR = Path(__file__).parents[2] / "audit" / "kb" / "data" / "vllm" / "raise_sites"

ARG_UTILS = '''
from vllm.config import CacheConfig, get_kwargs
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        parser.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        parser.add_argument("--max-num-seqs", type=int, default=None)
        parser.add_argument("--tool-call-parser", type=str, default=None)
        return parser
'''

CONFIG = '''
import vllm.envs as envs
class CacheConfig:
    cache_dtype: str = "auto"
    def verify(self, hf_config):
        if self.cache_dtype not in ("auto", "fp8"):
            raise ValueError(f"Unknown kv cache dtype: {self.cache_dtype}")
        if hf_config.head_dim % 32:
            msg = "head size {} is not supported by {}".format(hf_config.head_dim, "x")
            raise NotImplementedError(msg)
        if envs.VLLM_USE_V1 and self.max_num_seqs > 4:
            raise RuntimeError("max_num_seqs %d is too large for %s" % (self.max_num_seqs, 1))
        assert self.cache_dtype != "fp9", "fp9 is not a KV cache dtype at all"
        raise ValueError(some_message)
'''

LAUNCHER = '''
def validate(args, parser):
    if args.tool_call_parser not in valid:
        raise KeyError(f"invalid tool call parser: {args.tool_call_parser} "
                       f"(chose from {{ {','.join(valid)} }})")
    if args.max_num_seqs == 0:
        parser.error("--max-num-seqs must be positive, not zero")
'''

LAYOUTS = {
    "0.8-0.10 (vllm/config.py)": {"vllm/config.py": CONFIG,
                                  "vllm/engine/arg_utils.py": ARG_UTILS,
                                  "vllm/entrypoints/openai/api_server.py": LAUNCHER},
    "0.11-0.31 (vllm/config/)": {"vllm/config/cache.py": CONFIG,
                                 "vllm/engine/arg_utils.py": ARG_UTILS,
                                 "vllm/entrypoints/openai/api_server.py": LAUNCHER},
    "0.32+ (entrypoints/launchers)": {"vllm/config/cache.py": CONFIG,
                                      "vllm/engine/arg_utils.py": ARG_UTILS,
                                      "vllm/entrypoints/launchers/launcher.py": LAUNCHER},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_extractor_reads_every_message_form_of_each_layout(tmp_path: Path,
                                                                layout: str) -> None:
    for name, text in LAYOUTS[layout].items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = '9.9.9'\n")
    data = extract_sites(tmp_path)
    by_exc = {s["exc"]: s for s in data["sites"]}
    # a message that is no template (``raise ValueError(some_message)``) is left out
    assert data["count"] == len(data["sites"]) == 6
    kv = next(s for s in data["sites"] if "kv cache dtype" in s["pattern"])
    assert re.match(kv["pattern"], "Unknown kv cache dtype: fp9")
    assert kv["reads"] == ["--kv-cache-dtype"] and kv["guard"].startswith("self.cache_dtype")
    head = by_exc["NotImplementedError"]  # .format, bound to a name first
    assert re.match(head["pattern"], "head size 80 is not supported by x")
    assert "hf:head_dim" in head["reads"]
    percent = by_exc["RuntimeError"]
    assert re.match(percent["pattern"], "max_num_seqs 8 is too large for 1")
    assert percent["reads"][:2] == ["env:VLLM_USE_V1", "--max-num-seqs"]
    assert by_exc["AssertionError"]["guard"] == "self.cache_dtype != 'fp9'"
    parser = by_exc["KeyError"]
    hit = re.match(parser["pattern"], "invalid tool call parser: x (chose from { a,b })")
    assert hit and hit["h0"] == "x" and parser["reads"] == ["--tool-call-parser"]
    assert by_exc["SystemExit"]["pattern"].startswith(r"\-\-max\-num\-seqs must")


def test_every_release_has_its_raise_sites() -> None:
    shipped = rs.site_releases()
    assert shipped == releases() and len(shipped) == 19
    for release in shipped:
        data = json.loads(gzip.decompress((SITES_DIR / f"{release}.json.gz").read_bytes()))
        assert data["release"] == release and data["count"] == len(data["sites"]) > 1000
        assert data["provenance"]["file"].startswith(f"vllm-{release}-")
        assert len(data["architectures"]) > 100
        for site in data["sites"]:
            re.compile(site["pattern"])


# Messages of vLLM quoted in public reports (each URL): every one is a check of some shipped
# release; the quantization mismatch is a check of all of them.
SAMPLES = [
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least "
     "8.0. Your Tesla T4 GPU has compute capability 7.5.",
     "https://github.com/vllm-project/vllm/issues/1157"),
    ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (8192). This "
     "effectively limits the maximum sequence length to max_num_batched_tokens and makes "
     "vLLM reject longer sequences.", "https://github.com/vllm-project/vllm/pull/11061"),
    ("ValueError: Quantization method specified in the model config (fp8) does not match "
     "the quantization method specified in the `quantization` argument (gguf).",
     "https://github.com/vllm-project/vllm/issues/19050"),
]


def test_sample_messages_match_the_releases_that_raise_them() -> None:
    found = {}
    for line, _url in SAMPLES:
        found[line] = [r for r in rs.site_releases() if rs.match_line(line, r)]
    for line, releases_raising in found.items():
        assert releases_raising, line
    # the quantization mismatch check is in every release
    assert found[SAMPLES[2][0]] == list(rs.site_releases())
