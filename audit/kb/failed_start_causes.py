"""Causes of a failed start that vLLM's raise sites alone cannot name, from the host and
model facts of the report (:mod:`audit.kb.failed_start_facts`).

* :func:`driver_too_old`: PyTorch's "The NVIDIA driver on your system is too old (found
  version N)", CUDA's "CUDA driver version is insufficient for CUDA runtime version", or a
  CUDA driver API symbol a compiled extension cannot find: the host driver is older than the
  CUDA the installed wheels were built for. Not a vLLM setting: the change is the driver or
  the wheels. CUDA's error 804 (``cudaErrorCompatNotSupportedOnDevice``, "forward
  compatibility was attempted on non supported HW") is the same gap seen through the CUDA
  forward-compatibility library (:func:`_forward_compat`).
* :func:`quant_capability`: vLLM's minimum-capability check of a quantization method or of
  a compressed-tensors scheme. A pre-quantized checkpoint carries its method in config.json,
  so dropping ``--quantization`` cannot help; the change is a release whose minimum is at or
  below the GPU's capability (:mod:`audit.kb.quant_capability`), another checkpoint format
  or another GPU.
* :func:`extension_missing`: vLLM's compiled extension missing, or built against another
  PyTorch (an undefined C++ symbol of PyTorch's ``at::`` / ``c10::`` / ``torch::``
  namespaces), with the PyTorch the installed release pins where it is known
  (:data:`TORCH_PINS`).
* :func:`cuda_runtime_missing`: the loader cannot open ``libcudart.so.N`` (or cuBLAS /
  NVRTC of major N): the wheels were built for CUDA major N and the environment has no such
  runtime.
* :func:`worker_forked_after_cuda`: PyTorch's "Cannot re-initialize CUDA in forked
  subprocess" from a worker: the parent had initialised CUDA before vLLM forked its
  workers; the change is ``VLLM_WORKER_MULTIPROC_METHOD=spawn``.
* the memory budget at start-up (no KV cache left) is :mod:`audit.kb.failed_start_memory`.

Each returns the :class:`audit.kb.failed_start_explain.Explanation` fields to set, or None.
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb import quant_capability as qc
from audit.kb.versions import version_tuple

# ----------------------------------------------------------------------------- driver

_DRIVER_OLD = re.compile(r"NVIDIA driver on your system is too old(?: \(found version (\d+)\))?",
                         re.I)
_INSUFFICIENT = re.compile(r"CUDA driver version is insufficient for CUDA runtime version|"
                           r"cudaErrorInsufficientDriver|CUDA_ERROR_INSUFFICIENT_DRIVER", re.I)
#: A CUDA driver API entry point (libcuda's ``cuXxx``) missing at import: the driver predates
#: the CUDA the extension was built for (``cuTensorMapEncodeTiled`` is a CUDA 12.0 API).
_DRIVER_SYMBOL = re.compile(r"undefined symbol: (cu[A-Z]\w+)")
#: A wheel's CUDA build tag (``2.4.0+cu121``, an image tag ``…-cu130``).
_CU_TAG = re.compile(r"[+-]cu(\d{2})(\d)\b")
#: Minimum Linux driver of each CUDA major version under minor-version compatibility: NVIDIA's
#: "CUDA Compatibility" guide, minor version compatibility, Table 1 (13.x >= 580, 12.x >= 525,
#: 11.x >= 450), each at the build of the driver that shipped with the major's first toolkit
#: (the guide names 450.80.02 for CUDA 11.0; 525.60.13 and 580.65.06 are CUDA 12.0's and
#: 13.0's, as the release notes' driver tables list them).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _cuda_of(found: str) -> str:
    """cudaDriverGetVersion's integer (11040) as a CUDA version (11.4)."""
    value = int(found)
    return f"{value // 1000}.{(value % 1000) // 10}"


#: CUDA runtime error 804, ``cudaErrorCompatNotSupportedOnDevice`` (driver API
#: ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE``), as cudaGetDeviceCount reports it through
#: PyTorch ("Error 804: forward compatibility was attempted on non supported HW").
_FORWARD_COMPAT = re.compile(r"forward compatibility was attempted on non supported HW|"
                             r"\bError 804\b|cudaErrorCompatNotSupportedOnDevice|"
                             r"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", re.I)
#: NVIDIA, "CUDA Compatibility", Forward Compatibility
#: (https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html): the
#: cuda-compat package lets a newer CUDA runtime run on an older driver only on data-centre
#: GPUs, select NGC Server Ready RTX SKUs and Jetson boards; elsewhere CUDA initialisation
#: fails with error 804. vLLM's images put the package's library on the loader path (vLLM PR
#: #33992, 2026-02, made it depend on ``VLLM_ENABLE_CUDA_COMPATIBILITY`` because consumer
#: GPUs fail with it).
FORWARD_COMPAT_DOC = "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html"


def _forward_compat(line: str, facts: dict[str, Any], built: str | None) -> dict[str, Any]:
    """Error 804: the CUDA forward-compatibility library (an image's cuda-compat) was loaded
    because the host driver is older than the CUDA runtime of the image or wheels, and this
    GPU does not support forward compatibility: the driver, not a vLLM setting."""
    driver = facts.get("nvidia_driver_version")
    # a name NVML read (the GPU table knows its capability), never free text
    gpu = facts.get("gpu_name") if facts.get("cc") is not None else None
    image = facts.get("image")
    runtime = (f"CUDA {built}" if built else "the CUDA runtime") + (
        f" of the image {image}" if image else " of the image or wheels")
    host = f"the host's NVIDIA driver ({driver})" if driver else "the host's NVIDIA driver"
    major = int(built.split(".")[0]) if built else None
    need = (f" (CUDA {major}.x images need {MIN_DRIVER[major]} or newer; a driver whose "
            f"nvidia-smi 'CUDA Version' is at least {built} avoids the compatibility library)"
            if major in MIN_DRIVER else
            " (one whose nvidia-smi 'CUDA Version' is at least the image's CUDA)")
    return dict(
        kind="driver", error_line=line, setting=None,
        checked=("CUDA initialisation (cudaGetDeviceCount) loaded the CUDA "
                 "forward-compatibility library, which NVIDIA supports only on data-centre "
                 f"GPUs, select NGC-ready RTX cards and Jetson ({FORWARD_COMPAT_DOC})"),
        summary=(f"CUDA error 804: {runtime} is newer than what {host} supports, so CUDA "
                 "tried forward compatibility, which this GPU"
                 + (f" ({gpu})" if gpu else "") + " does not support: the GPU cannot be used "
                 "(the host driver, not a vLLM setting)"),
        change=(f"upgrade the host NVIDIA driver{need}, or run an image (or wheels) built for "
                "the CUDA the driver supports; on an image that sets "
                "VLLM_ENABLE_CUDA_COMPATIBILITY, keep it 0 on a GPU without forward "
                "compatibility"))


def driver_too_old(lines: list[str], facts: dict[str, Any]) -> dict[str, Any] | None:
    compat = next((x for x in reversed(lines) if _FORWARD_COMPAT.search(x)), None)
    if compat is not None:
        built = next((f"{m[1]}.{m[2]}" for text in [*lines, facts.get("image") or ""]
                      for m in [_CU_TAG.search(text)] if m), None)
        return _forward_compat(compat, facts, built)
    line = next((x for x in reversed(lines) if _DRIVER_OLD.search(x) or _INSUFFICIENT.search(x)
                 or _DRIVER_SYMBOL.search(x)), None)
    if line is None:
        return None
    old = _DRIVER_OLD.search(line)
    driver_cuda = _cuda_of(old[1]) if old and old[1] else facts.get("cuda_driver_version")
    driver = facts.get("nvidia_driver_version")
    built = next((f"{m[1]}.{m[2]}" for text in [*lines, facts.get("image") or ""]
                  for m in [_CU_TAG.search(text)] if m), None)
    symbol = _DRIVER_SYMBOL.search(line)
    has = (f"the host's NVIDIA driver supports CUDA {driver_cuda}" if driver_cuda else
           "the host's NVIDIA driver") + (f" (driver {driver})" if driver and not old else "")
    needs = (f"the CUDA {built} the installed PyTorch/vLLM wheels were built for" if built
             else "the CUDA the installed PyTorch/vLLM wheels were built for")
    major = int(built.split(".")[0]) if built else None
    upgrade = "upgrade the NVIDIA driver" + (
        f" (CUDA {major}.x needs {MIN_DRIVER[major]} or newer on Linux)"
        if major in MIN_DRIVER else "")
    wheels = ("or install PyTorch and vLLM wheels built for CUDA "
              f"{driver_cuda} or older" if driver_cuda else
              "or install PyTorch and vLLM wheels built for the CUDA the driver supports "
              "(nvidia-smi shows it)")
    return dict(
        kind="driver", error_line=line, setting=None,
        checked=("CUDA initialisation compares the driver's CUDA version with the CUDA "
                 "runtime the wheels were built for" + (
                     f"; libcuda lacks {symbol[1]}, a driver API newer than the driver"
                     if symbol else "")),
        summary=f"{has}, older than {needs}: the GPU cannot be used",
        change=f"{upgrade}, {wheels}")


# ----------------------------------------------------------------------------- installation

#: ``No module named 'vllm._C'`` (quotes vary; a ModuleNotFoundError or an ImportError). The
#: compiled modules are all ``vllm._<name>C`` (_C, _moe_C, _rocm_C, _flashmla_C …).
_NO_EXTENSION = re.compile(r"No module named \W?(vllm\._\w*C)\b")
#: An import of a shared object of the vllm package that fails on a missing symbol: the .so
#: was built against another PyTorch (C++ ABI) or CUDA runtime than the one installed. The
#: file name carries the interpreter tag (``_C.cpython-310-x86_64-linux-gnu.so``,
#: ``_C.abi3.so``). Any compiled module of the package counts, not only ``vllm._C``: releases
#: up to 0.2.x shipped one extension per kernel family (``vllm/quantization_ops``,
#: ``vllm/attention_ops``, ``vllm/cache_ops``, ...), later ones ``_moe_C``, ``_flashmla_C`` and
#: ``vllm_flash_attn/_vllm_fa2_C``. The colon after "undefined symbol" is dropped by some
#: quotes; then only an Itanium-mangled name (``_Z…``) is read as the symbol. A quote that
#: cuts the symbol off ("undefined symbol:", "undefined symbol error") still names the cause.
_EXTENSION_SYMBOL = re.compile(r"\bvllm/((?:\w+/)*?\w+?)(?:\.(?:cpython|abi3|pypy)[\w.-]*)?\.so"
                               r"\S*:? undefined symbol(?::\s*(\S+)|\s+(_Z\S+))?")
#: Itanium-mangled names in PyTorch's C++ namespaces (``_ZN2at``, ``_ZNK3c10``, ``_ZN5torch``):
#: the missing symbol is PyTorch's own, so the installed PyTorch is not the one vLLM's
#: extension was compiled against (PyTorch keeps no C++ ABI between minor releases).
_TORCH_SYMBOL = re.compile(r"^_ZN[KVR]*(?:2at|3c10|5torch)")
#: The PyTorch each vLLM release's CUDA wheel pins (``torch ==`` in its requirements), where a
#: public source states it: (PEP 440 range, pinned version, source).
TORCH_PINS: tuple[tuple[str, str, str, str], ...] = (
    # pyproject.toml pinned torch == 2.1.2 on 2024-02-21, 0.3.2's release day (PR #2804 review
    # thread); main moved to 2.2.1 in early April 2024 (issue #3987). Only 0.3.2-0.3.3 are
    # certainly inside that window.
    # a maintainer, 2023-11-14: main uses PyTorch 2.1.0 and 0.2.2 will as well (the source
    # URL below); 0.2.1's build still pinned 2.0.1 in pyproject.toml, as quoted in
    # https://github.com/vllm-project/vllm/issues/1283
    ("0.2.2", "0.2.3", "2.1.0", "https://github.com/vllm-project/vllm/issues/1661"),
    ("0.3.2", "0.4.0", "2.1.2", "https://github.com/vllm-project/vllm/pull/2804"),
    # 0.10.1.1 depends on torch 2.7.1 (NovaSky-AI/SkyRL PR #218); 2.8.0 came with PR #20358
    ("0.10.1", "0.10.2", "2.7.1", "https://github.com/NovaSky-AI/SkyRL/pull/218"),
    # vllm 0.14.0's lock resolves torch 2.9.1+cu128 (PrimeIntellect-ai/prime-rl PR #1625)
    ("0.14.0", "0.14.1", "2.9.1", "https://github.com/PrimeIntellect-ai/prime-rl/pull/1625"),
    # vllm 0.19.0 is the release for torch 2.10.0 (axolotl-ai-cloud/axolotl PR #3582)
    ("0.19.0", "0.19.1", "2.10.0", "https://github.com/axolotl-ai-cloud/axolotl/pull/3582"),
)


def installation_cause(line: str, *, checked: str, summary: str, change: str) -> dict[str, Any]:
    """An explanation of kind ``installation`` (the environment, not a setting) for the error
    ``line``: the shape :func:`audit.kb.failed_start_explain.explain` turns into a finding."""
    return dict(kind="installation", error_line=line, setting=None, checked=checked,
                summary=summary, change=change)


def torch_pin(version: str | None) -> str | None:
    """The PyTorch the vLLM ``version``'s CUDA wheel pins (:data:`TORCH_PINS`), or None."""
    have = version_tuple(version)
    if have is None:
        return None
    return next((pin for low, high, pin, _src in TORCH_PINS
                 if version_tuple(low) <= have < version_tuple(high)), None)


def _extension_symbol(found: re.Match) -> tuple[str, str | None]:
    """(module, symbol) of an :data:`_EXTENSION_SYMBOL` match: the module as Python names it
    (``_C``, ``quantization_ops``, ``vllm_flash_attn._vllm_fa2_C``; a source checkout's own
    ``vllm/`` directory above the package is dropped), the symbol None when not quoted."""
    module = found[1]
    while module.startswith("vllm/"):
        module = module[len("vllm/"):]
    return module.replace("/", "."), found[2] or found[3]


def _in_tree(found: re.Match) -> bool:
    """The failing .so path of an :data:`_EXTENSION_SYMBOL` match is not under an installed
    package directory (site-packages, dist-packages): a source checkout built in place."""
    return not re.search(r"(?:site|dist)-packages", found.string[:found.end(1)])


def extension_missing(lines: list[str], version: str | None = None) -> dict[str, Any] | None:
    for line in reversed(lines):
        found = _EXTENSION_SYMBOL.search(line)
        if found and not _DRIVER_SYMBOL.search(line):
            module, symbol = _extension_symbol(found)
            pin = torch_pin(version)
            pinned = (f"the PyTorch vLLM {version} pins ({pin})" if pin
                      else "the PyTorch version that vLLM release pins")
            if symbol and _TORCH_SYMBOL.search(symbol):
                return installation_cause(
                    line,
                    checked=(f"importing vLLM loads its compiled extension vllm.{module}, "
                             f"which needs the PyTorch C++ symbol {symbol[:80]} of the "
                             "PyTorch it was compiled against"),
                    summary=(f"vLLM's compiled extension vllm.{module} was built against "
                             "another PyTorch than the installed one (PyTorch symbol "
                             f"{symbol[:60]} undefined): PyTorch was upgraded or downgraded "
                             "after vLLM was installed; an installation problem, not a setting"),
                    change=(f"install the PyTorch vLLM {version} pins (pip install "
                            f"torch=={pin}, or pip install --force-reinstall vllm=={version}), "
                            "or a vLLM release built for the PyTorch you need" if pin else
                            "reinstall vLLM so that pip brings the PyTorch it pins, or install "
                            "the vLLM wheel built for the installed PyTorch") + (
                        "; this extension lies outside site-packages (a source build): "
                        "rebuild it against the installed PyTorch (pip install -e . "
                        "--no-build-isolation inside the checkout)" if _in_tree(found) else ""))
            return installation_cause(
                line,
                checked=(f"importing vLLM loads its compiled extension vllm.{module}, "
                         f"which needs the symbol {symbol or '(not quoted)'} from the "
                         "PyTorch/CUDA it was built against"),
                summary=(f"vLLM's compiled extension vllm.{module} was built for another "
                         "PyTorch/CUDA than the one installed (undefined symbol "
                         f"{(symbol or 'not quoted in the log')[:80]}): an installation "
                         "problem, not a setting"),
                change=(f"install the vLLM wheel built for the installed PyTorch (or {pinned}"
                        "), or rebuild vLLM from source against it"))
        missing = _NO_EXTENSION.search(line)
        if missing:
            return installation_cause(
                line,
                checked=(f"importing vLLM loads its compiled extension {missing[1]}, which "
                         "only a built vLLM has"),
                summary=(f"vLLM's compiled extension {missing[1]} is missing: the vllm "
                         "package Python imported was never built (a source checkout used "
                         "as is, or one that shadows the installed vLLM because the start ran "
                         "inside it) or was built for another Python: an installation "
                         "problem, not a setting"),
                change=("install a built vLLM wheel (pip install vllm), or build the "
                        "checkout (pip install -e . inside it); when a built vLLM is "
                        "installed, start from outside the source tree so that the checkout "
                        "does not shadow it"))
    return _other_extension(lines)


#: A shared object of another package (``transformer_engine_extensions*.so``,
#: ``flash_attn_2_cuda*.so``) that cannot load a PyTorch C++ symbol.
_OTHER_SYMBOL = re.compile(r"([\w.-]+?)(?:\.(?:cpython|abi3|pypy)[\w.-]*)?\.so\S*: undefined "
                           r"symbol(?::\s*|\s+)(_Z\S+)")


def _other_extension(lines: list[str]) -> dict[str, Any] | None:
    """Another package's compiled extension, imported at start-up, built against another
    PyTorch than the installed one (the missing symbol is PyTorch's own, as above): that
    package's build is the cause, not vLLM's and not a setting."""
    for line in reversed(lines):
        found = _OTHER_SYMBOL.search(line)
        if not found or _EXTENSION_SYMBOL.search(line) or not _TORCH_SYMBOL.search(found[2]):
            continue
        name = found[1]
        return installation_cause(
            line,
            checked=(f"the start imports the compiled extension {name} of another package "
                     f"than vLLM, which needs the PyTorch C++ symbol {found[2][:80]} of the "
                     "PyTorch it was compiled against"),
            summary=(f"the compiled extension {name} (not vLLM's) was built against another "
                     "PyTorch than the installed one (PyTorch symbol undefined): PyTorch was "
                     "changed after that package was installed, or the package came from "
                     "another environment; an installation problem, not a setting"),
            change=(f"reinstall or rebuild the package that ships {name} against the "
                    "installed PyTorch (the one vLLM pins), or uninstall it if nothing needs "
                    "it"))
    return None


# ----------------------------------------------------------------------------- CUDA runtime

#: The loader cannot open a CUDA toolkit library whose soname carries the CUDA major version
#: (NVIDIA's CUDA Compatibility guide: the runtime is ``libcudart.so.<major>``, and
#: binary compatibility holds within a major, not across majors; cuBLAS and NVRTC follow the
#: toolkit's major too). ``libcuda.so.1`` (the driver) is not one of them.
_RUNTIME_LIB = re.compile(r"\b(libcudart|libcublasLt|libcublas|libnvrtc)\.so\.(\d+)[\d.]*: "
                          r"cannot open shared object file", re.I)


def cuda_runtime_missing(lines: list[str], facts: dict[str, Any]) -> dict[str, Any] | None:
    """``libcudart.so.N: cannot open shared object file``: the installed vLLM (or the PyTorch
    it imports) was built for CUDA major N, and the environment has no CUDA N runtime: a
    wheel variant for another CUDA than the environment's (vLLM's default wheel follows the
    CUDA of the PyTorch it pins; 0.2.2's moved to CUDA 12.1, vllm-project/vllm issue #1718),
    or a container base image without that runtime. PyTorch's CUDA wheels bring the runtime
    as a pip package (``nvidia-cuda-runtime-cuN``), so a PyTorch of another CUDA leaves it
    out."""
    line = next((x for x in reversed(lines) if _RUNTIME_LIB.search(x)), None)
    if line is None:
        return None
    found = _RUNTIME_LIB.search(line)
    lib, major = f"{found[1]}.so.{found[2]}", int(found[2])
    driver_cuda = facts.get("cuda_driver_version")
    driver_short = None
    try:
        driver_short = int(str(driver_cuda).split(".")[0]) < major if driver_cuda else None
    except ValueError:
        driver_short = None
    driver = (f"; the host's driver supports only CUDA {driver_cuda}, so it needs an upgrade "
              f"too (CUDA {major}.x needs {MIN_DRIVER[major]} or newer on Linux)"
              if driver_short and major in MIN_DRIVER else
              f"; the driver must support CUDA {major} (Linux {MIN_DRIVER[major]} or newer)"
              if major in MIN_DRIVER else "")
    return installation_cause(
        line,
        checked=(f"importing vLLM loads its compiled extension and PyTorch, linked against "
                 f"the CUDA {major} runtime ({lib}), which the loader did not find"),
        summary=(f"the installed vLLM/PyTorch wheels were built for CUDA {major}, but this "
                 f"environment has no CUDA {major} runtime ({lib} cannot be opened): a wheel "
                 f"variant for another CUDA than the environment's, or a container base "
                 "without it; an installation problem, not a setting"),
        change=(f"install the vLLM and PyTorch wheels built for the CUDA this environment "
                f"has (the same +cuXY variant for both), or give it the CUDA {major} runtime "
                f"(the PyTorch wheel for CUDA {major}, which brings nvidia-cuda-runtime-cu"
                f"{major}, or a CUDA {major} base image){driver}"))


# ----------------------------------------------------------------------------- worker start

_FORKED = re.compile(r"Cannot re-initialize CUDA in forked subprocess", re.I)
#: vLLM reads VLLM_WORKER_MULTIPROC_METHOD (fork by default) when it starts its worker
#: processes: used on 0.5.0.post1 in vllm-project/vllm issue #5637 and listed in the 0.6.1
#: environment-variable docs (instructlab/instructlab issue #2439); ``vllm serve`` sets it to
#: spawn itself from 0.6.3 (same thread; ``cli_env_setup``, docs/vllm-facts.md).
WORKER_METHOD_SINCE = "0.5.0.post1"
SERVE_SPAWNS_SINCE = "0.6.3"


def worker_forked_after_cuda(lines: list[str], env: dict[str, str] | None,
                             version: str | None) -> dict[str, Any] | None:
    """A worker process could not initialise CUDA because it was forked from a parent that
    had already initialised it (PyTorch refuses CUDA in a forked child): the parent touched
    the GPU before vLLM started its tensor-parallel workers (the caller's own code, or a
    release whose engine did), and the workers were started with ``fork``."""
    line = next((x for x in reversed(lines) if _FORKED.search(x)), None)
    if line is None:
        return None
    env = env or {}
    method = env.get("VLLM_WORKER_MULTIPROC_METHOD")
    have = version_tuple(version)
    checked = ("PyTorch refuses to initialise CUDA in a process forked from one that already "
               "had: vLLM starts its tensor/pipeline-parallel workers with "
               "VLLM_WORKER_MULTIPROC_METHOD (fork by default)")
    summary = ("a vLLM worker was forked after CUDA was initialised in the parent process, "
               "so it cannot use the GPU (PyTorch cannot re-initialize CUDA in a forked "
               "subprocess)")
    if method == "spawn":
        return dict(kind="environment", error_line=line, setting=None, checked=checked,
                    summary=summary + "; VLLM_WORKER_MULTIPROC_METHOD is already spawn, so "
                    "the fork is the calling program's own (it forks after touching CUDA)",
                    change="start vLLM from a process that has not initialised CUDA, or let "
                    "the calling program use the spawn start method")
    if have is not None and have < version_tuple(WORKER_METHOD_SINCE):
        return dict(kind="environment", error_line=line, setting=None, checked=checked,
                    summary=summary,
                    change="do not touch CUDA in the process before vLLM starts its "
                    "workers, or upgrade to a release that has VLLM_WORKER_MULTIPROC_METHOD "
                    f"({WORKER_METHOD_SINCE} and later) and set it to spawn")
    return dict(kind="environment", error_line=line,
                setting="env:VLLM_WORKER_MULTIPROC_METHOD", value=method or "fork",
                checked=checked, summary=summary,
                change="set VLLM_WORKER_MULTIPROC_METHOD=spawn in the server's environment "
                "(or do not touch CUDA before vLLM starts its workers)" + (
                    f"; `vllm serve` sets spawn itself from {SERVE_SPAWNS_SINCE}"
                    if have is None or have < version_tuple(SERVE_SPAWNS_SINCE) else ""))


# ----------------------------------------------------------------------------- quantization

_QUANT_CAP = re.compile(r"quantization method ([\w-]+) is not supported for the current GPU"
                        r"\W+Minimum capability\W+(\d+)\W+Current capability\W+(\d+)", re.I)
_SCHEME_CAP = re.compile(r"Quantization scheme is not supported for\W+the current GPU"
                         r"(?:\W+(?:Required|Minimum) capability\W+(\d+)\W+Current "
                         r"capability\W+(\d+))?", re.I)
#: Methods that only describe a checkpoint's stored weights (vLLM reads them from its
#: config.json; nothing quantizes to them at load time).
CHECKPOINT_FORMATS = {"awq", "awq_marlin", "gptq", "gptq_marlin", "gptq_marlin_24", "marlin",
                      "compressed-tensors", "modelopt", "modelopt_fp4", "gguf", "aqlm",
                      "squeezellm", "quark", "mxfp4", "exl2", "hqq", "gptq_bitblas"}
#: Formats offered as alternatives when the GPU is below a method's minimum.
_ALTERNATIVES = ("gptq", "awq", "gguf", "bitsandbytes")


def _cc(value: int) -> str:
    return f"{value / 10:.1f}"


def quant_capability(lines: list[str], facts: dict[str, Any], running: str | None,
                     label: str, cc: float | None) -> dict[str, Any] | None:
    for line in reversed(lines):
        found = _QUANT_CAP.search(line)
        if found:
            return _method(line, found[1].lower(), int(found[2]), int(found[3]), facts,
                           running, label)
        scheme = _SCHEME_CAP.search(line)
        if scheme:
            have = int(scheme[2]) if scheme[2] else (round(cc * 10) if cc else None)
            return _scheme(line, int(scheme[1]) if scheme[1] else None, have, facts, running,
                           label)
    return None


def _method(line: str, method: str, need: int, have: int, facts: dict[str, Any],
            running: str | None, label: str) -> dict[str, Any]:
    later = qc.first_accepting(qc.history(method), have, running)
    checkpoint = facts.get("quant_method") == method or method in CHECKPOINT_FORMATS
    others = [m for m in qc.runnable_methods(have, _ALTERNATIVES) if m != method]
    ways = []
    if later:
        ways.append(f"upgrade to vLLM {later} or newer, whose minimum for {method} is at or "
                    f"below {_cc(have)}")
    if checkpoint:
        ways.append("serve a checkpoint in a format this GPU runs"
                    + (f" ({', '.join(others)})" if others else ""))
    else:
        ways.append(f"drop --quantization {method} (serve the weights unquantized, if they "
                    "fit)")
    ways.append(f"or use a GPU of compute capability {_cc(need)} or higher")
    why = (f"the checkpoint itself is {method}-quantized (vLLM reads the method from its "
           "config.json), so dropping --quantization does not help; " if checkpoint else "")
    return dict(
        summary=(f"vLLM {label} needs compute capability {_cc(need)} for {method}; this GPU "
                 f"has {_cc(have)}" + (f" (vLLM {later} and later accept it)" if later
                                      else "")),
        change=why + "; ".join(ways), changed_in=later,
        drop_fix=not checkpoint)


def _scheme(line: str, need: int | None, have: int | None, facts: dict[str, Any],
            running: str | None, label: str) -> dict[str, Any] | None:
    if have is None:
        return None
    method = "compressed-tensors"
    known = qc.detect_scheme(method, facts.get("quant_config"))
    candidates = [known] if known else list(qc.schemes(method))
    lowered = []
    for name in candidates:
        later = qc.first_accepting(qc.scheme_history(method, name), have, running)
        if later:
            lowered.append((name, later))
    need_text = f" needs compute capability {_cc(need)}" if need else \
        " needs a higher compute capability"
    if known and lowered:
        name, later = lowered[0]
        change = (f"upgrade to vLLM {later} or newer, which runs the {name} scheme from "
                  f"capability {_cc(have)}; or serve a checkpoint format this GPU runs, or a "
                  "newer GPU")
        summary = (f"the checkpoint's compressed-tensors {name} scheme{need_text} in vLLM "
                   f"{label}; this GPU has {_cc(have)}")
    elif lowered:
        names = "; ".join(f"{qc.schemes(method)[n].get('label', n)}: vLLM {r}"
                          for n, r in lowered)
        change = (f"if the checkpoint uses one of the schemes later releases run on "
                  f"capability {_cc(have)} ({names}), upgrade to that release; otherwise "
                  "serve a checkpoint format this GPU runs (GPTQ/AWQ) or use a newer GPU")
        summary = (f"a compressed-tensors scheme of the checkpoint{need_text} in vLLM "
                   f"{label}; this GPU has {_cc(have)}")
        later = lowered[0][1]
    else:
        return None
    return dict(summary=summary, change=change, changed_in=later, drop_fix=False)
