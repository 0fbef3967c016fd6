"""A failed start's explanation says only what it knows: whose setting fed the check, which
values apply on this platform, whether the release registers the architecture, and which
release ran (audit.kb.failed_start_explain). Lines are vLLM's own messages, from the raise
sites of the release judged (audit/kb/data/vllm/raise_sites) and its argument parser."""

from __future__ import annotations

from packaging.version import Version

from audit.kb.failed_start_explain import explain
from audit.kb.release_caps import architecture_index, caps
from audit.kb.vllm_tables import releases

# vllm/config/vllm.py (VllmConfig.validate_nvfp4_kv_cache_with_mla, 0.32.0): its guard reads
# cache_config.cache_dtype, i.e. --kv-cache-dtype
NVFP4_MLA = ("ValueError: nvfp4 KV cache is not supported with MLA (Multi-head Latent "
             "Attention) backends. Please use a different --kv-cache-dtype (e.g., 'fp8', "
             "'auto', or 'nvfp4_ds_mla' with a sparse MLA backend) for MLA models such as "
             "DeepSeek.")
HEADS = ("ValueError: Total number of attention heads (52) must be divisible by tensor "
         "parallel size (8).")


def test_a_setting_in_the_argv_is_the_operators_in_any_spelling() -> None:
    for argv in (["vllm", "serve", "m", "--kv-cache-dtype", "nvfp4"],
                 ["vllm", "serve", "m", "--kv-cache-dtype=nvfp4"]):
        found = explain([NVFP4_MLA], argv, "0.32.0")
        assert found.setting == "--kv-cache-dtype" and found.operator_set is True, argv
        assert found.value == "nvfp4"
    found = explain([HEADS], ["vllm", "serve", "m", "--tensor-parallel=8"], "0.32.0")
    assert found.setting == "--tensor-parallel-size" and found.operator_set is True


def test_a_setting_left_at_its_default_is_not_called_the_operators() -> None:
    found = explain([NVFP4_MLA], ["vllm", "serve", "deepseek-ai/DeepSeek-V3"], "0.32.0")
    assert found.setting == "--kv-cache-dtype"
    assert found.operator_set is False and found.value is None
    assert found.default == "auto" and "vLLM's default (auto)" in found.change
    assert not found.change.startswith("set ") and found.fix_argv is None
    # vLLM (or the model's config) chose the value the message names: not the operator's
    kernel = explain(["RuntimeError: this kernel does not support fp8_e5m2"],
                     ["vllm", "serve", "m"], "0.32.0")
    assert kernel.setting == "--kv-cache-dtype" and kernel.value is None
    assert kernel.operator_set is False and "vLLM's default" in kernel.change


def test_a_placeholder_argv_never_claims_a_default() -> None:
    for argv in (["vllm", "serve", "<model>"], []):
        found = explain([NVFP4_MLA], argv, "0.32.0")
        assert found.setting == "--kv-cache-dtype" and found.operator_set is None, argv
        assert "default" not in (found.change or ""), argv


def test_values_offered_are_those_of_the_servers_platform() -> None:
    line = ("api_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8_incc' "
            "(choose from 'auto', 'fp8', 'fp8_inc')")
    argv = ["vllm", "serve", "m", "--kv-cache-dtype", "fp8_incc"]
    on_gpu = explain([line], argv, "0.32.0", platform="cuda", cc=9.0)
    kv_cuda = {d for spec in caps("0.32.0")["attention_backends"].values()
               if spec["platform"] == "cuda" for d in spec["kv_cache_dtypes"]["supported"]}
    assert "fp8_inc" not in on_gpu.valid_values and "fp8" in on_gpu.valid_values
    assert set(on_gpu.valid_values) >= kv_cuda - {"fp8_inc"}
    assert on_gpu.fix_argv and "fp8_inc" not in on_gpu.fix_argv
    unknown = explain([line], argv, "0.32.0")  # platform unknown: listed, none picked
    assert "fp8_inc" in unknown.valid_values and "nearest" not in unknown.change
    assert unknown.fix_argv == ["vllm", "serve", "m"]


def test_a_registered_architecture_is_not_blamed_on_the_release() -> None:
    newest = releases()[-1]
    arch = sorted(caps(newest)["architectures"])[0]
    found = explain([f"ValueError: Model architectures ['{arch}'] are not supported for now."],
                    ["vllm", "serve", "m"], newest)
    assert found.kind == "architecture_load_failed" and found.confidence == "medium"
    assert f"registers {arch}" in found.summary and "not recognised" in found.summary
    assert found.change is None and found.changed_in is None
    assert not found.names_setting_and_change


def test_with_no_version_an_architecture_every_release_has_is_not_blamed_on_a_release(
        ) -> None:
    """A failed start that reports no vLLM version: an architecture every shipped table
    registers is never "not registered in" the table used to judge it."""
    known = list(releases())
    arch = sorted(set(caps(known[0])["architectures"]) & set(caps(known[-1])["architectures"]))[0]
    found = explain([f"ValueError: Model architectures ['{arch}'] are not supported for now."],
                    ["vllm", "serve", "m"], None)
    assert found.kind == "architecture_load_failed"
    assert "does not register" not in found.summary and "not reported" in found.summary
    assert found.change is None and not found.names_setting_and_change


def test_an_unregistered_architecture_names_the_nearest_release_that_has_it() -> None:
    index = architecture_index()
    known = list(releases())
    arch, having = next((a, r) for a, r in sorted(index.items()) if r[0] != known[0])
    before = known[known.index(having[0]) - 1]
    found = explain([f"ValueError: Model architectures ['{arch}'] are not supported for now."],
                    ["vllm", "serve", "m"], before)
    assert found.setting == "hf:architectures" and found.changed_in == having[0]
    assert f"run vLLM {having[0]}" in found.change
    gone, kept = next((a, r) for a, r in sorted(index.items()) if r[-1] != known[-1])
    found = explain([f"ValueError: Model architectures ['{gone}'] are not supported for now."],
                    ["vllm", "serve", "m"], known[-1])
    assert found.changed_in == kept[-1]  # removed: the last release that registered it


def test_the_running_release_is_named_not_the_substitute_table() -> None:
    oldest = releases()[0]
    older = f"{Version(oldest).major}.{Version(oldest).minor - 2}.4"
    found = explain(["api_server.py: error: unrecognized arguments: --max-num-seqz"],
                    ["vllm", "serve", "m", "--max-num-seqz", "8"], older)
    assert f"vLLM {older} (judged with the nearest shipped table, {oldest})" in found.summary
    assert f"vLLM {oldest} has" not in found.summary and found.release == oldest


def test_an_environment_variable_is_the_operators_only_when_the_env_has_it() -> None:
    # vllm/lora (0.32.0): a guard that reads VLLM_LORA_ENABLE_DUAL_STREAM
    line = "ValueError: Dual CUDA streams are only supported on CUDA platforms."
    argv = ["vllm", "serve", "m", "--enable-lora"]
    mine = explain([line], argv, "0.32.0", env={"VLLM_LORA_ENABLE_DUAL_STREAM": "1"})
    assert mine.setting == "env:VLLM_LORA_ENABLE_DUAL_STREAM" and mine.operator_set is True
    unknown = explain([line], argv, "0.32.0", env={"PATH": "/usr/bin"})
    assert unknown.setting == mine.setting and unknown.operator_set is None
