"""Failed starts that Ray stopped: the cluster or placement group vLLM's workers were to run
in, not a vLLM setting.

vLLM's Ray executor puts one single-GPU bundle per rank (TP x PP of them) in a placement group
before it starts a worker. The checks, read from the wheels (vllm-0.6.4.post1 and 0.11.0
``vllm/executor/ray_utils.py`` ``initialize_ray_cluster``, ``_wait_until_pg_ready``,
``_verify_bundles``; ``vllm/executor/ray_distributed_executor.py`` ``_init_workers_ray``;
the raise-site tables ``data/vllm/raise_sites/*.json.gz`` list them for every release):

* **an existing placement group too small**: started inside a Ray task, actor or Serve
  replica (``ray.util.get_current_placement_group()``) or handed a placement group, vLLM counts
  that group's GPU bundles and refuses a world size above it ("The number of required GPUs
  exceeds the total number of available GPUs in the placement group", followed in both wheels
  by "Required number of devices: N. Total number of devices: M"). Without such a group the same
  words are only a WARNING: the cluster counts fewer GPUs than TP x PP and vLLM waits;
* **the cluster cannot give the group** within the wait (``PG_WAIT_TIMEOUT``, 1800 s in both
  wheels): "Cannot provide a placement group of placement_group_specs=…";
* **the node vLLM runs on holds no GPU** in Ray's view ("Current node has no GPU available",
  "Ray does not allocate any GPUs on the driver node", "driver node id … is not included in a
  placement group"): the driver must sit on a GPU node of the cluster
  (https://github.com/vllm-project/vllm/issues/6956);
* **two nodes with one address** ("Every node should have a unique IP address"): vLLM's own
  message names ``VLLM_HOST_IP``, which must be each node's own address.

Seen on the tracker with placement groups made by Ray Serve / Ray Data or by hand:
https://github.com/vllm-project/vllm/issues/2416, https://github.com/vllm-project/vllm/issues/26028.
vLLM's multi-node guide: https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html.
"""

from __future__ import annotations

import re
from typing import Any

from audit.kb.flags import parse_argv

_PG_SHORT = re.compile(r"number of required (\w+?)s? exceeds the total number of available "
                       r"\w+? in the placement group", re.I)
_PG_NUMBERS = re.compile(r"Required number of devices: (\d+)\. Total number of devices: (\d+)")
_PG_TIMEOUT = re.compile(r"Cannot provide a placement group of placement_group_specs=(.*?) "
                         r"within ([\d.]+) seconds", re.I)
_NO_DRIVER_GPU = re.compile(r"Current node has no \w+ available|Ray does not allocate any GPUs "
                            r"on the driver node|driver node id \S+ is not included in a "
                            r"placement group", re.I)
#: One bundle's GPU key in the placement_group_specs vLLM prints ({'GPU': 1.0, ...}).
_GPU_BUNDLE = re.compile(r"['\"]GPU['\"]\s*:")
_SAME_IP = re.compile(r"Every node should have a unique IP address", re.I)
_WARNING = re.compile(r"\bWARNING\b")

_STATUS = "`ray status` on the head node shows the GPUs the cluster has and how many are in use"


def _world(argv: list[str]) -> tuple[int | None, int | None]:
    """(TP, PP) from the argv; None where the argv does not set it or is not a command."""
    values = parse_argv(argv).values
    tp, pp = values.get("tensor_parallel_size"), values.get("pipeline_parallel_size")
    return (tp if isinstance(tp, int) else None), (pp if isinstance(pp, int) else None)


def _needs(tp: int | None, pp: int | None) -> str:
    if tp is None and pp is None:
        return "TP x PP"
    return f"TP x PP = {(tp or 1) * (pp or 1)}"


def ray_cluster(lines: list[str], argv: list[str],
                env: dict[str, str] | None) -> dict[str, Any] | None:
    """Explanation fields for a start stopped by Ray's placement of the workers, or None."""
    tp, pp = _world(argv)
    setting = {"setting": "--tensor-parallel-size", "value": tp} if tp is not None else {}
    for line in reversed(lines):
        if _PG_SHORT.search(line):
            numbers = _PG_NUMBERS.search(line)
            has = f" ({numbers.group(2)} GPU bundles for {numbers.group(1)} ranks)" \
                if numbers else ""
            if _WARNING.search(line):
                return dict(
                    kind="environment", error_line=line, **setting,
                    checked="vLLM's Ray executor compared TP x PP with the GPUs the Ray "
                    "cluster reports (ray.cluster_resources) before creating its placement "
                    "group",
                    summary=f"the Ray cluster counts fewer GPUs than the {_needs(tp, pp)} ranks "
                    "need, so the placement group cannot be created and vLLM waits for GPUs "
                    "that are not there",
                    change="join the nodes that hold the missing GPUs to the cluster (ray start "
                    "--address=<head>:6379 on each, with the same vLLM and Python), or lower "
                    f"--tensor-parallel-size / --pipeline-parallel-size to what it has; {_STATUS}")
            return dict(
                kind="environment", error_line=line, **setting,
                checked="vLLM's Ray executor counted the GPU bundles of the placement group it "
                "was started in (a Ray task, actor or Serve replica, or one handed to it) and "
                "found fewer than TP x PP",
                summary=f"vLLM runs inside a Ray placement group with fewer GPUs{has} than the "
                f"{_needs(tp, pp)} ranks it starts; every rank needs a bundle of one GPU",
                change="give the placement group one {\"GPU\": 1} bundle per rank (a Serve "
                "deployment's placement_group_bundles, the group of the task or actor that "
                "creates the engine), or lower --tensor-parallel-size / "
                f"--pipeline-parallel-size to the bundles it has; {_STATUS}")
        found = _PG_TIMEOUT.search(line)
        if found:
            asked = len(_GPU_BUNDLE.findall(found.group(1)))
            count = f"{asked} GPUs" if asked else f"the GPUs of {_needs(tp, pp)}"
            return dict(
                kind="environment", error_line=line, **setting,
                checked=f"vLLM asked Ray for a placement group of {count} (one bundle per rank) "
                f"and Ray could not place it within {found.group(2)} seconds",
                summary=f"the Ray cluster has no {count} free: nodes that have not joined, GPUs "
                "held by other actors (an earlier engine still running), or a Ray node started "
                "without its GPUs",
                change=f"{_STATUS}; free the GPUs (stop the actors or engines holding them), join "
                "the missing nodes, or lower --tensor-parallel-size / --pipeline-parallel-size "
                "to the free GPUs")
        if _NO_DRIVER_GPU.search(line):
            return dict(
                kind="environment", error_line=line,
                checked="vLLM's Ray executor needs a GPU of the placement group on the node where "
                "the engine (the driver) runs, and Ray reports none there",
                summary="vLLM was started on a node of the Ray cluster that has no GPU in Ray's "
                "view (a CPU head node, a node started with --num-gpus=0, or a container that "
                "does not see its GPUs), so its first rank has nowhere to run",
                change="start vLLM on a GPU node of the cluster (usually the head node started "
                "with its GPUs), check `ray status` / `ray list nodes` for that node's GPUs, and "
                "in a container pass the GPUs to the process that runs `ray start`")
        if _SAME_IP.search(line):
            host_ip = (env or {}).get("VLLM_HOST_IP")
            return dict(
                kind="environment", error_line=line,
                **({"setting": "env:VLLM_HOST_IP", "value": host_ip} if host_ip else {}),
                checked="vLLM's Ray executor groups the workers by node and found fewer distinct "
                "IP addresses than nodes",
                summary="two or more nodes of the Ray cluster report the same IP address to vLLM, "
                "most often VLLM_HOST_IP set to one address (the head's) on every node",
                change="set VLLM_HOST_IP on each node to that node's own address before its "
                "`ray start` (or leave it unset), and make sure the nodes reach each other on "
                "distinct addresses")
    return None
