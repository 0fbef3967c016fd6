"""A four-server Gemma 4 node from the seed recipes (``demo/data/seeds``), with HTTP emulators.

1. seed 001: ``docker run ... -e HF_TOKEN vllm/vllm-openai:cu130-nightly
   nvidia/Gemma-4-31B-IT-NVFP4 ... --speculative-config eagle3``; reached through the
   Docker port mapping; template from the HF cache ``chat_template.jinja``.
2. seed 003: ``vllm serve nvidia/Gemma-4-26B-A4B-NVFP4 ... --speculative-config mtp``
   in a venv with ``--api-key``; template from ``tokenizer_config.json`` (list form)
   under ``$HF_HOME``.
3. vLLM recipe (vllm-facts.md 4.4): ``vllm serve google/gemma-4-31B-it -tp 2
   --chat-template examples/tool_chat_template_gemma4.jinja`` relative to its cwd;
   two TP workers.
4. ``python -m vllm.entrypoints.openai.api_server --model /models/gemma-4-31B-it-awq``
   with a local model directory; installed vLLM newer than the running one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fa_fakenode import FakeNode, ServerPids

from demo.emulator import Behaviour, Emulator
from demo.paths import metrics_dir

HF_TOKEN = "hf_PlantedTokenValue0123456789"
API_KEY = "sk-planted-api-key-9876543210"
COMMIT_31B = "1f2e3d4c5b6a79880123456789abcdef01234567"
COMMIT_26B = "abcdefabcdefabcdefabcdefabcdefabcdef0001"
TEMPLATE_31B = "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}{% endfor %}"
TEMPLATE_26B = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
TOOL_TEMPLATE = "{# tool_chat_template_gemma4.jinja #}{% for m in messages %}{{ m }}{% endfor %}"
AWQ_TEMPLATE = "{# awq local #}{{ messages }}"
CAPTURES = [
    "vllm-benchmarking-fixture_v0.25.1_opt-125m-ngram3-specdecode.prom",
    "lmswitch-fixture_2026-09-custom_dsv4-flash-mtp6.prom",
    "inferstack-fixture_v0.29.0_qwen2.5-1.5b-t4.prom",
    "vllm-benchmarking-fixture_v0.25.1_opt-125m-tp2-loaded.prom",
]


@dataclass
class GemmaServer:
    """One server of the node: pids, emulator, and what the report should say."""

    name: str
    pids: ServerPids
    emulator: Emulator
    template: str
    template_source: str
    running: str
    installed: str


def _emulator(version: str, model: str, root: str, capture: str,
              api_key: str | None = None) -> Emulator:
    text = (metrics_dir() / capture).read_text()
    return Emulator(Behaviour(version=version, model_id=model, root=root, metrics=text,
                              api_key=api_key))


def build_gemma_node(node: FakeNode) -> list[GemmaServer]:
    """Add the four servers and start their emulators (caller stops them)."""
    return [_seed_001(node), _seed_003(node), _recipe_tp2(node), _local_awq(node)]


def _seed_001(node: FakeNode) -> GemmaServer:
    emu = _emulator("0.30.1rc1.dev12+gabc1234", "nvidia/Gemma-4-31B-IT-NVFP4",
                    "nvidia/Gemma-4-31B-IT-NVFP4", CAPTURES[0])
    cid = "c0ffee" * 10 + "abcd"
    cgroup = node.docker_container(cid, "vllm/vllm-openai:cu130-nightly", {8000: emu.port})
    node.install_vllm(cid, "/usr/local", "0.30.1rc1.dev12+gabc1234",
                      site="lib/python3.12/dist-packages")
    node.hf_snapshot(cid, "/root/.cache/huggingface/hub", "nvidia/Gemma-4-31B-IT-NVFP4",
                     COMMIT_31B, {"chat_template.jinja": TEMPLATE_31B,
                                  "tokenizer_config.json": '{"chat_template": "other"}'})
    argv = ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "nvidia/Gemma-4-31B-IT-NVFP4",
            "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "65536",
            "--gpu-memory-utilization", "0.85", "--max-num-seqs", "1", "--speculative-config",
            '{"model":"RedHatAI/gemma-4-31B-it-speculator.eagle3","method":"eagle3",'
            '"num_speculative_tokens":3}']
    env = {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/root", "HF_TOKEN": HF_TOKEN}
    pids = node.add_vllm(argv, env=env, cwd="/vllm-workspace", ns=cid, cgroup=cgroup)
    return GemmaServer("seed-001", pids, emu, TEMPLATE_31B,
                       f"hf-cache:nvidia/Gemma-4-31B-IT-NVFP4@{COMMIT_31B}/chat_template.jinja",
                       "0.30.1rc1.dev12+gabc1234", "0.30.1rc1.dev12+gabc1234")


def _seed_003(node: FakeNode) -> GemmaServer:
    emu = _emulator("0.25.1", "nvidia/Gemma-4-26B-A4B-NVFP4", "nvidia/Gemma-4-26B-A4B-NVFP4",
                    CAPTURES[1], api_key=API_KEY)
    node.install_vllm(None, "/opt/gemma-venv", "0.25.1")
    config = ('{"chat_template": [{"name": "tool_use", "template": "x"}, '
              f'{{"name": "default", "template": "{TEMPLATE_26B}"}}]}}')
    node.hf_snapshot(None, "/data/hf/hub", "nvidia/Gemma-4-26B-A4B-NVFP4", COMMIT_26B,
                     {"tokenizer_config.json": config})
    argv = ["/opt/gemma-venv/bin/python3", "/opt/gemma-venv/bin/vllm", "serve",
            "nvidia/Gemma-4-26B-A4B-NVFP4", "--max-model-len", "65536", "--max-num-seqs", "256",
            "--gpu-memory-utilization", "0.85", "--port", str(emu.port), "--api-key", API_KEY,
            "--speculative-config", '{"method":"mtp","model":"google/gemma-4-26B-A4B-it-assistant",'
            '"num_speculative_tokens":3}']
    env = {"PATH": "/opt/gemma-venv/bin:/usr/bin", "HOME": "/home/ml", "HF_HOME": "/data/hf"}
    pids = node.add_vllm(argv, env=env, cwd="/home/ml", listen=(emu.port,))
    return GemmaServer("seed-003", pids, emu, TEMPLATE_26B,
                       f"hf-cache:nvidia/Gemma-4-26B-A4B-NVFP4@{COMMIT_26B}/tokenizer_config.json",
                       "0.25.1", "0.25.1")


def _recipe_tp2(node: FakeNode) -> GemmaServer:
    emu = _emulator("0.28.0", "gemma-4-31b", "google/gemma-4-31B-it", CAPTURES[2])
    node.install_vllm(None, "/opt/vllm", "0.28.0")
    node.write_file(None, "/srv/vllm/examples/tool_chat_template_gemma4.jinja", TOOL_TEMPLATE)
    argv = ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "google/gemma-4-31B-it",
            "--served-model-name", "gemma-4-31b", "--tensor-parallel-size", "2",
            "--max-model-len", "32768", "--port", str(emu.port),
            "--reasoning-parser", "gemma4", "--tool-call-parser", "gemma4",
            "--enable-auto-tool-choice", "--chat-template",
            "examples/tool_chat_template_gemma4.jinja", "--kv-cache-dtype", "fp8"]
    env = {"PATH": "/opt/vllm/bin:/usr/bin", "HOME": "/home/ml",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    pids = node.add_vllm(argv, tp=2, env=env, cwd="/srv/vllm", listen=(emu.port,),
                         forked_copy=True)
    return GemmaServer("recipe-tp2", pids, emu, TOOL_TEMPLATE,
                       "examples/tool_chat_template_gemma4.jinja", "0.28.0", "0.28.0")


def _local_awq(node: FakeNode) -> GemmaServer:
    emu = _emulator("0.22.0", "/models/gemma-4-31B-it-awq", "/models/gemma-4-31B-it-awq",
                    CAPTURES[3])
    node.install_vllm(None, "/usr", "0.23.1", site="lib/python3/dist-packages")
    node.write_file(None, "/models/gemma-4-31B-it-awq/chat_template.jinja", AWQ_TEMPLATE)
    node.write_file(None, "/models/gemma-4-31B-it-awq/config.json", "{}")
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
            "/models/gemma-4-31B-it-awq", "--quantization", "awq_marlin",
            f"--port={emu.port}", "--max-num-batched-tokens", "8192"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    pids = node.add_vllm(argv, env=env, cwd="/root", exe="/usr/bin/python3.12",
                         listen=(emu.port,))
    return GemmaServer("local-awq", pids, emu, AWQ_TEMPLATE,
                       "/models/gemma-4-31B-it-awq/chat_template.jinja", "0.22.0", "0.23.1")


def stop_all(servers: list[GemmaServer]) -> None:
    """Stop the emulators."""
    for server in servers:
        server.emulator.stop()


def node_root(tmp: Path) -> FakeNode:
    """A fresh fake node under ``tmp/root``."""
    return FakeNode(tmp / "root")
