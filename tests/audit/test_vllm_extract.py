"""The extractor on a small synthetic vLLM source tree shaped like the real one (a wheel is
~400 MB; ``python -m audit.kb.vllm_extract.check WHEEL`` compares a real one by hand)."""

from __future__ import annotations

import json
import textwrap
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from audit.kb.vllm_extract.conditions import evaluate
from audit.kb.vllm_extract.source import extract

FILES = {
    "vllm/_version.py": '__version__ = version = "9.9.0"\n',
    "vllm/utils/argparse_utils.py": """
        class EnableDisableAction:
            _inverse_prefixes = {"--enable-": "--disable-", "--disable-": "--enable-"}
    """,
    "vllm/config/cache.py": """
        from typing import Literal
        CacheDType = Literal["auto", "fp8", "fp8_e4m3"]
        class CacheConfig:
            block_size: int | None = None
            gpu_memory_utilization: float = 0.92
            enable_prefix_caching: bool = True
            cache_dtype: CacheDType = "auto"
    """,
    "vllm/config/scheduler.py": """
        class SchedulerConfig:
            max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1)
            max_num_batched_tokens: int = Field(default=2048)
            enable_chunked_prefill: SkipValidation[bool] = None  # 0.11 spelling
    """,
    "vllm/config/model.py": """
        class ModelConfig:
            model: str = "Qwen/Qwen3-0.6B"
            max_model_len: int | None = None
            served_model_name: str | list[str] | None = None
            hf_token: bool | str | None = None
            hf_overrides: dict = field(default_factory=dict)
    """,
    "vllm/config/speculative.py": """
        SpeculativeMethod = Literal["ngram", "eagle3", "mtp"]
        class SpeculativeConfig:
            method: SpeculativeMethod | None = None
            num_speculative_tokens: int | None = None
            model: str | None = None
    """,
    "vllm/config/vllm.py": """
        class VllmConfig:
            speculative_config: SpeculativeConfig | None = None
    """,
    "vllm/engine/arg_utils.py": """
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                model_kwargs = get_kwargs(ModelConfig)
                cache_kwargs = get_kwargs(CacheConfig)
                scheduler_kwargs = get_kwargs(SchedulerConfig)
                vllm_kwargs = get_kwargs(VllmConfig)
                group = parser.add_argument_group("ModelConfig")
                group.add_argument("--model", **model_kwargs["model"])
                group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
                group.add_argument("--served-model-name", **model_kwargs["served_model_name"])
                group.add_argument("--hf-token", **model_kwargs["hf_token"])
                group.add_argument("--hf-overrides", **model_kwargs["hf_overrides"])
                group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
                group.add_argument("--gpu-memory-utilization", "--device-memory-utilization",
                                   **cache_kwargs["gpu_memory_utilization"])
                group.add_argument("--enable-prefix-caching",
                                   **cache_kwargs["enable_prefix_caching"])
                group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                group.add_argument("--max-num-seqs",
                                   **{**scheduler_kwargs["max_num_seqs"], "default": None})
                group.add_argument("--max-num-batched-tokens",
                                   **scheduler_kwargs["max_num_batched_tokens"])
                group.add_argument("--speculative-config", "-sc",
                                   **vllm_kwargs["speculative_config"])
                group.add_argument("--disable-log-stats", action="store_true")
                group.add_argument("--swap-space", type=float, default=4, deprecated=True)
                group.add_argument("--enable-chunked-prefill",
                                   **scheduler_kwargs["enable_chunked_prefill"])
                for arg, type in [("--guided-decoding-backend", str),
                                  ("--guided-decoding-disable-fallback", bool)]:
                    group.add_argument(arg, type=type, deprecated=True)
                return parser

            @classmethod
            def get_batch_defaults(cls, world_size):
                try:
                    device_memory = current_platform.get_device_total_memory()
                    device_name = current_platform.get_device_name().lower()
                    is_gb10 = current_platform.is_device_capability((12, 1))
                except Exception:
                    device_memory = 0
                if device_memory >= 160 * GiB_bytes:
                    default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 16384,
                                                      UsageContext.OPENAI_API_SERVER: 16384}
                    default_max_num_seqs = {UsageContext.LLM_CLASS: 1024,
                                            UsageContext.OPENAI_API_SERVER: 1024}
                elif device_memory >= 70 * GiB_bytes and "a100" not in device_name \\
                        and not is_gb10:
                    default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 16384,
                                                      UsageContext.OPENAI_API_SERVER: 8192}
                    default_max_num_seqs = {UsageContext.LLM_CLASS: 1024,
                                            UsageContext.OPENAI_API_SERVER: 1024}
                else:
                    default_max_num_batched_tokens = {UsageContext.LLM_CLASS: 8192,
                                                      UsageContext.OPENAI_API_SERVER: 2048}
                    default_max_num_seqs = {UsageContext.LLM_CLASS: 256,
                                            UsageContext.OPENAI_API_SERVER: 256}
                return default_max_num_batched_tokens, default_max_num_seqs
    """,
    "vllm/entrypoints/common/cli_args.py": """
        class BaseFrontendArgs:
            middleware: list[str] = field(default_factory=lambda: [])
            enable_auto_tool_choice: bool = False

            @classmethod
            def _customize_cli_kwargs(cls, frontend_kwargs):
                frontend_kwargs["middleware"]["action"] = "append"
                del frontend_kwargs["middleware"]["nargs"]
                return frontend_kwargs

            @classmethod
            def add_cli_args(cls, parser):
                frontend_kwargs = get_kwargs(cls)
                frontend_kwargs = cls._customize_cli_kwargs(frontend_kwargs)
                for key, value in frontend_kwargs.items():
                    parser.add_argument(f"--{key.replace('_', '-')}", **value)
                return parser

        class FrontendArgs(BaseFrontendArgs):
            host: str | None = None
            port: int = 8000

        def make_arg_parser(parser):
            parser.add_argument("model_tag", type=str, nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser = FrontendArgs.add_cli_args(parser)
            return parser
    """,
    "vllm/v1/metrics/loggers.py": """
        class PrometheusStatLogger:
            def __init__(self):
                self.rejections = self._counter_cls(
                    name="vllm:admission_rejections", documentation="Rejected.",
                    labelnames=["model_name", "reason"])
                self.running = self._gauge_cls(
                    name="vllm:num_requests_running", documentation="Running.",
                    labelnames=["model_name", "engine"])
                self.ttft = self._histogram_cls(
                    name="vllm:time_to_first_token_seconds", documentation="TTFT.",
                    labelnames=["model_name", "engine"], buckets=[0.1, 1.0])
    """,
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _table(tree: Path, out: Path) -> dict:
    call_command("vllm_extract", str(tree), "--out", str(out))
    return json.loads((out / "9.9.0.json").read_text())


def test_options_every_spelling_type_and_default(tree: Path, tmp_path: Path) -> None:
    options = _table(tree, tmp_path / "out")["options"]
    assert options["--enable-prefix-caching"]["negative"] == [
        "--disable-prefix-caching", "--disable_prefix_caching",
        "--no-enable-prefix-caching", "--no_enable_prefix_caching"]
    assert options["--enable-prefix-caching"]["takes"] == "none"
    assert "--device-memory-utilization" in options["--gpu-memory-utilization"]["spellings"]
    assert options["--gpu-memory-utilization"]["default"] == 0.92
    assert options["--tensor-parallel-size"]["spellings"] == [
        "--tensor-parallel-size", "--tensor_parallel_size", "-tp"]
    assert options["--max-model-len"]["type"] == "int(human-readable|auto)"
    assert options["--max-num-batched-tokens"]["type"] == "int(human-readable)"
    assert options["--max-num-seqs"]["default"] is None  # the call's own override wins
    assert options["--served-model-name"]["takes"] == "many"
    assert options["--hf-token"]["takes"] == "optional"
    assert options["--hf-overrides"]["default"] == {}
    assert options["--kv-cache-dtype"]["choices"] == ["auto", "fp8", "fp8_e4m3"]
    assert options["--speculative-config"]["type"] == "json(SpeculativeConfig)"
    assert options["--speculative-config"]["config_keys"] == [
        "method", "model", "num_speculative_tokens"]
    assert options["--disable-log-stats"]["type"] == "flag(store_true)"
    assert options["--swap-space"]["deprecated"] is True
    assert options["model_tag"]["takes"] == "optional"
    assert options["--enable-chunked-prefill"]["takes"] == "none"  # SkipValidation[bool]
    assert options["--guided-decoding-backend"]["deprecated"] is True
    assert options["--guided-decoding-disable-fallback"]["type"] == "bool(value)"
    assert options["--guided-decoding-disable-fallback"]["takes"] == "one"
    # frontend fields come from the subclass served by `vllm serve`, customised
    assert options["--port"]["default"] == 8000 and options["--port"]["type"] == "int"
    assert options["--middleware"]["type"] == "append[str]"
    assert options["--middleware"]["takes"] == "one"
    assert "--disable-auto-tool-choice" in options["--enable-auto-tool-choice"]["negative"]


def test_batch_table_config_defaults_spec_and_metrics(tree: Path, tmp_path: Path) -> None:
    table = _table(tree, tmp_path / "out")
    h100 = {"memory_gib": 79.6, "name": "nvidia h100 80gb hbm3", "capability": [9, 0]}
    gb10 = {"memory_gib": 119.7, "name": "nvidia gb10", "capability": [12, 1]}
    picks = {name: next(r for r in table["batch_defaults"] if evaluate(r["when"], gpu))
             for name, gpu in (("h100", h100), ("gb10", gb10))}
    assert picks["h100"]["max_num_batched_tokens"] == {"api_server": 8192, "llm": 16384}
    assert picks["gb10"]["max_num_seqs"]["api_server"] == 256
    assert table["config_defaults"]["gpu_memory_utilization"] == 0.92
    assert table["config_defaults"]["enable_chunked_prefill"] is None  # set at start
    assert table["config_defaults"]["kv_cache_dtype"] == "auto"
    assert table["speculative"]["methods"] == ["eagle3", "mtp", "ngram"]
    assert table["metrics"]["vllm:admission_rejections"]["type"] == "counter"
    assert table["metrics"]["vllm:admission_rejections"]["exposed_as"] == [
        "vllm:admission_rejections_total"]
    assert table["metrics"]["vllm:time_to_first_token_seconds"]["type"] == "histogram"


def test_a_wheel_reads_like_its_unpacked_tree(tree: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in tree.rglob("*.py"):
            archive.write(path, path.relative_to(tree).as_posix())
    assert extract(wheel)["flags"] == extract(tree)["flags"]


def test_a_folder_without_vllm_sources_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        extract(tmp_path)
