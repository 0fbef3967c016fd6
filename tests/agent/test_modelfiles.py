"""The agent reads the served model's config and weight size from a fake HF cache or a local
directory, with the vLLM process's own file rights, bounded."""

from __future__ import annotations

import json
import os

from fa_fakenode import FakeNode

from fleet_agent import modelfiles
from fleet_agent.schema import parse_report

CACHE = "/root/.cache/huggingface/hub"
QWEN_CFG = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
            "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
INDEX = {"metadata": {"total_size": 61_064_245_248}, "weight_map": {"a": "m-1.safetensors"}}


def _status(node: FakeNode, pid: int, uid: int, gid: int, groups: str = "") -> None:
    (node.root / "proc" / str(pid) / "status").write_text(
        f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{gid}\t{gid}\t{gid}\t{gid}\n"
        f"Groups:\t{groups}\n")


def _files(report):
    (entry,) = report.servers
    return entry.model_files


def test_hf_cache_revision_picks_that_snapshot_config_and_index_size(node, run_collect):
    node.hf_snapshot(None, CACHE, "Qwen/Qwen3-30B-A3B", "a" * 40,
                     {"config.json": json.dumps({**QWEN_CFG, "num_hidden_layers": 1})})
    node.hf_snapshot(None, CACHE, "Qwen/Qwen3-30B-A3B", "b" * 40,
                     {"config.json": json.dumps(QWEN_CFG),
                      "generation_config.json": '{"temperature": 0.6}',
                      "model.safetensors.index.json": json.dumps(INDEX)}, ref="v2")
    node.add_vllm(["vllm", "serve", "Qwen/Qwen3-30B-A3B", "--revision", "v2"], listen=(),
                  env={"HOME": "/root"})
    files = _files(run_collect(node, probe_http=False))
    assert files.source == f"hf-cache:Qwen/Qwen3-30B-A3B@{'b' * 40}"
    assert files.config["num_hidden_layers"] == 48
    assert files.generation_config == {"temperature": 0.6}
    assert files.weights_bytes == 61_064_245_248
    assert files.weights_dtype == "bfloat16"


def test_symlinked_snapshot_files_are_followed_and_sized_without_an_index(node, run_collect):
    base = f"{CACHE}/models--org--m"
    blob = node.write_file(None, f"{base}/blobs/abc", b"x" * 4096)
    cfg = node.write_file(None, f"{base}/blobs/cfg", json.dumps(QWEN_CFG))
    snap = node.ns_dir(None) / f"{base}/snapshots/{'c' * 40}".lstrip("/")
    snap.mkdir(parents=True)
    os.symlink(os.path.relpath(blob, snap), snap / "model-00001.safetensors")
    os.symlink(os.path.relpath(cfg, snap), snap / "config.json")
    node.write_file(None, f"{base}/refs/main", "c" * 40)
    node.add_vllm(["vllm", "serve", "org/m"], listen=(),
                  env={"HF_HOME": "/root/.cache/huggingface"})
    files = _files(run_collect(node, probe_http=False))
    assert files.weights_bytes == 4096
    assert files.config["num_experts"] == 128


def test_legacy_cache_env_and_container_namespace(node, run_collect):
    node.hf_snapshot("c1", "/models/hub", "org/m", "d" * 40, {"config.json": json.dumps(QWEN_CFG)})
    node.add_vllm(["vllm", "serve", "org/m"], listen=(), ns="c1",
                  env={"HUGGINGFACE_HUB_CACHE": "/models/hub"})
    files = _files(run_collect(node, probe_http=False))
    assert files.source == f"hf-cache:org/m@{'d' * 40}"
    assert files.config["model_type"] == "qwen3_moe"


def test_local_directory_with_quantisation_and_a_local_drafter(node, run_collect):
    cfg = {**QWEN_CFG, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128,
                                                                                           128]}}
    node.write_file(None, "/models/qwen/config.json", json.dumps(cfg))
    node.write_file(None, "/models/qwen/model-1.safetensors", b"w" * 100)
    node.write_file(None, "/models/qwen/model-2.safetensors", b"w" * 50)
    node.write_file(None, "/models/draft/config.json", '{"model_type": "eagle"}')
    spec = json.dumps({"method": "eagle3", "model": "/models/draft", "num_speculative_tokens": 3})
    node.add_vllm(["vllm", "serve", "/models/qwen", "--speculative-config", spec], listen=())
    files = _files(run_collect(node, probe_http=False))
    assert files.source == "/models/qwen"
    assert files.weights_bytes == 150 and files.weights_dtype == "fp8"
    assert files.quantization_config["weight_block_size"] == [128, 128]
    assert files.speculator.source == "/models/draft"
    assert files.speculator.config == {"model_type": "eagle"}


def test_missing_and_truncated_configs_are_errors_not_data(node, run_collect):
    node.write_file(None, "/m/bad/config.json", '{"num_hidden_layers": 4')
    node.add_vllm(["vllm", "serve", "/m/bad"], listen=())
    node.add_vllm(["vllm", "serve", "org/absent"], listen=(), env={"HOME": "/root"})
    report = run_collect(node, probe_http=False)
    parse_report(json.loads(report.model_dump_json()))
    by_source = {s.argv[2]: s.model_files for s in report.servers}
    assert by_source["/m/bad"].config is None
    assert any("not valid JSON" in e for e in by_source["/m/bad"].errors)
    assert by_source["org/absent"].source is None
    assert "not in HF cache" in by_source["org/absent"].errors[0]


def test_an_oversized_config_is_refused_and_vision_towers_are_reduced(node, run_collect):
    huge = {"num_hidden_layers": 2, "pad": "x" * (modelfiles.MAX_CONFIG_BYTES + 10)}
    node.write_file(None, "/m/huge/config.json", json.dumps(huge))
    gemma = {"model_type": "gemma3", "text_config": {"num_hidden_layers": 62, "layer_types":
                                                     ["sliding_attention"] * 62},
             "vision_config": {"hidden_size": 1152, "image_sizes": list(range(5000))}}
    node.write_file(None, "/m/gemma/config.json", json.dumps(gemma))
    node.add_vllm(["vllm", "serve", "/m/huge"], listen=())
    node.add_vllm(["vllm", "serve", "/m/gemma"], listen=())
    by_source = {s.argv[2]: s.model_files for s in run_collect(node, probe_http=False).servers}
    assert by_source["/m/huge"].config is None
    assert "larger than 256 KiB" in by_source["/m/huge"].errors[0]
    text = by_source["/m/gemma"].config
    assert len(text["text_config"]["layer_types"]) == 62
    assert text["vision_config"] == {"hidden_size": 1152}


def test_files_the_vllm_user_cannot_read_are_not_read_for_it(node, run_collect):
    secret = node.write_file(None, "/home/alice/model/config.json", json.dumps(QWEN_CFG))
    os.chown(secret, 1001, 1001)
    secret.chmod(0o600)
    pids = node.add_vllm(["vllm", "serve", "/home/alice/model"], listen=())
    _status(node, pids.server, uid=1002, gid=1002)
    files = _files(run_collect(node, probe_http=False))
    assert files.config is None
    assert "not readable" in files.errors[0]


def test_files_the_vllm_user_owns_or_shares_by_group_are_read(node, tmp_path):
    own = node.write_file(None, "/srv/m/config.json", "{}")
    os.chown(own, 1002, 50)
    own.chmod(0o640)
    ids = modelfiles.ProcessIds(uids=frozenset({1002}), gids=frozenset({1002}))
    assert modelfiles.readable_by(own, ids)
    group = modelfiles.ProcessIds(uids=frozenset({7}), gids=frozenset({50}))
    assert modelfiles.readable_by(own, group)
    other = modelfiles.ProcessIds(uids=frozenset({7}), gids=frozenset({7}))
    assert not modelfiles.readable_by(own, other)
    assert not modelfiles.readable_by(own, None)  # ids unknown: world-readable only


def test_a_world_readable_file_in_a_private_directory_is_not_read(node, run_collect):
    inner = node.write_file(None, "/home/alice/private/model/config.json", json.dumps(QWEN_CFG))
    private = inner.parent.parent
    os.chown(private, 1001, 1001)
    private.chmod(0o700)
    pids = node.add_vllm(["vllm", "serve", "/home/alice/private/model"], listen=())
    _status(node, pids.server, uid=1002, gid=1002)
    files = _files(run_collect(node, probe_http=False))
    assert files.config is None
    private.chmod(0o755)
    assert _files(run_collect(node, probe_http=False)).config["num_experts"] == 128


def test_secrets_in_a_models_config_never_leave_the_node(node, run_collect):
    hf, key = "hf_" + "Zq4" * 12, "AIza" + "x7_" * 11 + "ab"
    cfg = {**QWEN_CFG, "hf_token": hf, "password": "pw-in-config-1",
           "auto_map": {"note": f"fetched with {key}"}}
    node.write_file(None, "/models/qwen/config.json", json.dumps(cfg))
    node.add_vllm(["vllm", "serve", "/models/qwen"], listen=())
    report = run_collect(node, probe_http=False)
    sent = report.model_dump_json()
    assert [s for s in (hf, key, "pw-in-config-1") if s in sent] == []
    config = _files(report).config
    assert config["hf_token"] == config["password"] == "REDACTED"
    assert config["model_type"] == "qwen3_moe"
