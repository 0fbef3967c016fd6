"""Failed starts whose cause is the installation or the process environment, not a vLLM
setting: a PyTorch other than the one vLLM's compiled extension was built against, a CUDA
runtime library of the wheels' CUDA major missing, and tensor-parallel workers forked after
CUDA was initialised. Every report is built here, none is read from a case file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.kb.failed_start_causes import TORCH_PINS, torch_pin
from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402


def _explained(lines: list[str], version: str | None, *, argv: list[str] | None = None,
               cuda: str | None = None, env: dict | None = None):
    report = casekit.report_skeleton("install", casekit._gpus(
        [{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80, "count": 2}], "t"))
    report["host"]["cuda_driver_version"] = cuda
    failed = casekit.failed_start_of("1", argv or ["vllm", "serve", "m/x"], None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], version, env=env,
                   facts=facts_of(report, failed))


# ----------------------------------------------------------------------------- PyTorch ABI

TORCH_LINE = ("ImportError: /usr/local/lib/python3.10/dist-packages/vllm/_C.cpython-310-"
              "x86_64-linux-gnu.so: undefined symbol: _ZN2at4_ops15to_dtype_layout4callERKNS_"
              "6TensorE")


def test_a_pytorch_symbol_missing_from_the_extension_names_the_pinned_pytorch() -> None:
    out = _explained(["Traceback (most recent call last):", TORCH_LINE], "0.3.2")
    assert out.kind == "installation" and out.setting is None
    assert "another PyTorch than the installed one" in out.summary
    assert "installation problem" in out.summary
    assert "pip install torch==2.1.2" in out.change and "vllm==0.3.2" in out.change


def test_without_a_known_pin_the_change_still_names_the_pytorch_mismatch() -> None:
    out = _explained([TORCH_LINE], "0.6.3")
    assert out.kind == "installation"
    assert "PyTorch it pins" in out.change and "installed PyTorch" in out.change
    assert "torch==" not in out.change


@pytest.mark.parametrize(("version", "pin"), [
    ("0.2.2", "2.1.0"), ("0.2.1", None), ("0.2.3", None),
    ("0.3.2", "2.1.2"), ("0.3.3", "2.1.2"), ("0.3.1", None), ("0.4.0", None),
    ("0.10.1.1", "2.7.1"),
    ("0.14.0", "2.9.1"), ("0.19.0", "2.10.0"), (None, None), ("0.25.1", None)])
def test_the_torch_pins_cover_only_their_sourced_ranges(version, pin) -> None:
    assert torch_pin(version) == pin
    assert all(src.startswith("https://github.com/") for *_, src in TORCH_PINS)


def test_a_non_pytorch_symbol_stays_the_generic_extension_mismatch() -> None:
    line = ("ImportError: /opt/v/lib/python3.12/site-packages/vllm/_moe_C.abi3.so: undefined "
            "symbol: _Z17cutlass_moe_mm_sm90v")
    out = _explained([line], "0.9.2")
    assert out.kind == "installation" and "another PyTorch/CUDA" in out.summary


def test_a_per_kernel_extension_of_an_old_release_is_read_like_vllm_c() -> None:
    """Releases up to 0.2.x shipped one extension per kernel family; a PyTorch symbol missing
    from any of them is the same mismatch, with 0.2.2's pinned PyTorch (2.1.0)."""
    line = ("ImportError: /home/u/.venv/lib/python3.9/site-packages/vllm/attention_ops.cpython-"
            "39-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")
    out = _explained([line], "0.2.2")
    assert out.kind == "installation" and "vllm.attention_ops" in out.summary
    assert "another PyTorch than the installed one" in out.summary
    assert "pip install torch==2.1.0" in out.change
    assert "source build" not in out.change


def test_an_in_tree_build_is_told_to_rebuild_and_a_quote_without_colon_is_read() -> None:
    line = ("ImportError: /home/u/src/vllm/vllm/_C.abi3.so: undefined symbol "
            "_ZN3c106ivalue14ConstantString6createE")
    out = _explained([line], None)
    assert out.kind == "installation" and "vllm._C " in out.summary
    assert "source build" in out.change and "--no-build-isolation" in out.change


def test_a_pytorch_symbol_missing_in_another_package_names_that_package() -> None:
    line = ("ImportError: /usr/lib/python3/dist-packages/transformer_engine_extensions.cpython-"
            "310-x86_64-linux-gnu.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameE")
    out = _explained([line], "0.3.3")
    assert out.kind == "installation" and "vLLM's compiled extension" not in out.summary
    assert "transformer_engine_extensions (not vLLM's)" in out.summary
    assert "transformer_engine_extensions" in out.change and "vllm==" not in out.change


def test_a_non_pytorch_symbol_in_another_package_is_not_read_as_a_pytorch_mismatch() -> None:
    line = ("ImportError: /usr/lib/python3/dist-packages/foo_ext.cpython-310-x86_64-linux-gnu"
            ".so: undefined symbol: _Z9cutlass_mmv")
    out = _explained([line], "0.6.3")
    assert out.kind != "installation" and "PyTorch" not in out.summary


# ----------------------------------------------------------------------------- CUDA runtime

@pytest.mark.parametrize(("lib", "major"), [("libcudart.so.12", 12), ("libcudart.so.13", 13),
                                            ("libcublasLt.so.12", 12)])
def test_a_missing_cuda_runtime_names_the_wheels_cuda_major(lib: str, major: int) -> None:
    line = f"ImportError: {lib}: cannot open shared object file: No such file or directory"
    out = _explained(["Traceback (most recent call last):", line], "0.21.0", cuda="13.0")
    assert out.kind == "installation" and out.setting is None
    assert f"built for CUDA {major}" in out.summary
    assert f"no CUDA {major} runtime" in out.summary
    assert f"CUDA {major} runtime" in out.change and "+cuXY variant" in out.change


def test_a_driver_older_than_the_missing_runtime_is_named_too() -> None:
    line = "ImportError: libcudart.so.12: cannot open shared object file: No such file"
    out = _explained([line], "0.2.2", cuda="11.8")
    assert "supports only CUDA 11.8" in out.change and "525.60.13" in out.change


def test_the_driver_library_itself_is_not_a_cuda_runtime() -> None:
    line = "ImportError: libcuda.so.1: cannot open shared object file: No such file"
    assert _explained([line], "0.21.0").kind != "installation"


# ----------------------------------------------------------------------------- worker fork

FORK_LINE = ("(VllmWorkerProcess pid=81) ERROR Exception in worker VllmWorkerProcess while "
             "processing method init_device: Cannot re-initialize CUDA in forked subprocess. "
             "To use CUDA with multiprocessing,")
TP = ["vllm", "serve", "m/x", "--tensor-parallel-size", "2"]


def test_workers_forked_after_cuda_init_are_told_to_spawn() -> None:
    out = _explained([FORK_LINE], "0.5.3.post1", argv=TP)
    assert out.kind == "environment"
    assert out.setting == "env:VLLM_WORKER_MULTIPROC_METHOD" and out.value == "fork"
    assert "forked after CUDA was initialised" in out.summary
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in out.change
    assert "0.6.3" in out.change  # vllm serve spawns by itself from there
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" in _explained([FORK_LINE], "0.8.5").change
    assert "0.6.3" not in _explained([FORK_LINE], "0.8.5").change


def test_an_env_that_already_spawns_points_at_the_calling_program() -> None:
    out = _explained([FORK_LINE], "0.6.1", argv=TP,
                     env={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    assert out.setting is None and "already spawn" in out.summary
    assert "VLLM_WORKER_MULTIPROC_METHOD=spawn" not in out.change


def test_a_release_before_the_variable_is_not_told_to_set_it() -> None:
    out = _explained([FORK_LINE], "0.4.2", argv=TP)
    assert out.setting is None and "upgrade" in out.change
