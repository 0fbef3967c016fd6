"""Failed starts that Ray's placement of vLLM's workers stopped (audit/kb/failed_start_ray.py):
what the operator sees is where the GPUs are missing and what to change; every report is built
here."""

from __future__ import annotations

import sys
from pathlib import Path

from audit.kb.failed_start_explain import explain
from audit.kb.failed_start_facts import facts_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import casekit  # noqa: E402

PG_SHORT = ("ValueError: The number of required GPUs exceeds the total number of available "
            "GPUs in the placement group.")


def _explain(lines: list[str], version: str | None, argv: list[str] | None = None,
             env: dict[str, str] | None = None):
    argv = argv or ["vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "4"]
    gpus = casekit._gpus([{"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80, "count": 2}], "r")
    report = casekit.report_skeleton("ray", gpus)
    failed = casekit.failed_start_of("1", argv, None, lines)
    report["failed_starts"] = [failed]
    return explain(failed["lines"], failed["argv"], version, env=env,
                   facts=facts_of(report, failed))


def test_a_placement_group_smaller_than_tp_x_pp_says_how_many_gpus_each_side() -> None:
    line = PG_SHORT + " Required number of devices: 8. Total number of devices: 4."
    argv = ["vllm", "serve", "m", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]
    out = _explain([line], "0.9.2", argv)
    assert out.kind == "environment" and out.setting == "--tensor-parallel-size"
    assert "TP x PP = 8" in out.summary and "4 GPU bundles for 8 ranks" in out.summary
    assert "placement_group_bundles" in out.change and "ray status" in out.change


def test_the_old_message_without_counts_is_the_same_cause() -> None:
    """0.2.x-0.6.x print the sentence alone; the ranks come from the argv."""
    out = _explain(["[rank0]: " + PG_SHORT], "0.5.4")
    assert out.kind == "environment" and "TP x PP = 4" in out.summary
    assert "--tensor-parallel-size" in out.change


def test_the_same_words_as_a_warning_point_at_the_cluster_not_a_placement_group() -> None:
    line = ("WARNING 03-30 14:11:45 [ray_utils.py:352] The number of required GPUs exceeds the "
            "total number of available GPUs in the placement group.")
    out = _explain([line], "0.8.5")
    assert out.kind == "environment" and "Ray cluster counts fewer GPUs" in out.summary
    assert "ray start --address" in out.change


def test_a_placement_group_wait_that_timed_out_counts_the_gpus_asked() -> None:
    line = ("ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0, "
            "'node:10.0.0.1': 0.001}, {'GPU': 1.0}, {'GPU': 1.0}, {'GPU': 1.0}] within 1800 "
            "seconds. See `ray status` and `ray list nodes` to make sure the cluster has enough "
            "resources.")
    out = _explain([line], "0.9.2")
    assert out.kind == "environment" and "no 4 GPUs free" in out.summary
    assert "1800 seconds" in out.checked and "free the GPUs" in out.change


def test_a_driver_on_a_node_without_gpus_is_told_to_start_on_a_gpu_node() -> None:
    for line, version in (
            ("ValueError: Current node has no GPU available. current_node_resource={'CPU': 8.0}. "
             "vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available "
             "in a node current_node_id='ab' current_ip='10.0.0.1'.", "0.8.5"),
            ("ValueError: Ray does not allocate any GPUs on the driver node. Consider adjusting "
             "the Ray placement group or running the driver on a GPU node.", "0.5.3")):
        out = _explain([line], version)
        assert out.kind == "environment", line
        assert "no GPU in Ray's view" in out.summary and "GPU node" in out.change
        # not "upgrade to a release without this check": the cluster is the cause
        assert "where this check is gone" not in (out.change or "")


def test_nodes_sharing_one_address_name_vllm_host_ip_when_it_is_set() -> None:
    line = ("RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids "
            "['a', 'b'] and 1 unique IP addresses {'10.0.0.1'}. Please check your network "
            "configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is "
            "unique for each node.")
    argv = ["vllm", "serve", "m", "--tensor-parallel-size", "2",
            "--distributed-executor-backend", "ray"]
    out = _explain([line], "0.7.3", argv, env={"VLLM_HOST_IP": "10.0.0.1"})
    assert out.kind == "environment" and out.setting == "env:VLLM_HOST_IP"
    assert out.value == "10.0.0.1" and "own address" in out.change
    plain = _explain([line], "0.7.3", argv)
    assert plain.setting is None and "VLLM_HOST_IP" in plain.change


def test_a_world_size_above_the_local_gpus_without_ray_stays_the_tp_check() -> None:
    """Near miss: the multiprocessing executor's own check names --tensor-parallel-size; the
    Ray explanation must not take it over."""
    line = ("ValueError: World size (4) is larger than the number of available GPUs (2) in this "
            "node. If this is intentional and you are using: - ray, set "
            "'--distributed-executor-backend ray'. - multiprocessing, set '--nnodes' "
            "appropriately.")
    out = _explain([line], "0.33.0")
    assert out.kind == "raise_site" and out.setting == "--tensor-parallel-size"
    assert "placement group" not in out.summary
