"""Which Kubernetes pod a vLLM process runs in, without the Kubernetes API.

Sources, all on the node (the agent's ServiceAccount has no API rights):

1. The process's cgroup path (``/proc/<pid>/cgroup``) names the pod UID and the container
   id. Shapes (kubelet's cgroup drivers, cgroup v1 and v2 alike)::

       cgroupfs:  /kubepods/burstable/pod<uid>/<64-hex id>
                  /kubepods/pod<uid>/<id>                                   (Guaranteed QoS)
       systemd:   /kubepods.slice/kubepods-besteffort.slice/
                  kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope
                  (``crio-<id>.scope``, ``docker-<id>.scope`` for CRI-O, cri-dockerd)

2. The container runtime's own record of the container, whose annotations/labels the
   kubelet set: containerd's OCI bundle
   ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``
   (``io.kubernetes.cri.sandbox-namespace``, ``...sandbox-name``, ``...container-name``,
   ``...image-name``), CRI-O's ``/run/containers/storage/overlay-containers/<id>/userdata/
   config.json`` (``io.kubernetes.pod.namespace``, ``io.kubernetes.pod.name``,
   ``io.kubernetes.container.name``, ``io.kubernetes.cri-o.ImageName``) and Docker's
   ``config.v2.json`` labels (``io.kubernetes.*``, cri-dockerd). Annotation names: the
   containerd CRI plugin's ``pkg/cri/annotations`` and CRI-O's ``pkg/annotations``.

3. The process's environment: ``POD_NAMESPACE``/``POD_NAME`` when the downward API sets them
   (the usual names), ``HOSTNAME`` (the pod's name unless ``spec.hostname`` is set) and
   ``KUBERNETES_SERVICE_HOST`` (present in every pod with service links).

Every value is another user's data: names must match Kubernetes' own syntax (DNS-1123
labels/subdomains, a UUID) or they are dropped, and nothing is longer than Kubernetes allows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fleet_agent import procfs

_POD_UID = re.compile(
    r"kubepods.*?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?(?:/(?:[a-z-]+-)?([0-9a-f]{64}))?")
#: DNS-1123 label (namespace, container name: 63) and subdomain (pod name: 253), from the
#: Kubernetes API conventions ("Object Names and IDs").
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,499}$")

#: Where each runtime keeps a container's config, and the keys naming the pod in it.
_CONTAINERD = ("run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json",
               "annotations", {"namespace": "io.kubernetes.cri.sandbox-namespace",
                               "pod": "io.kubernetes.cri.sandbox-name",
                               "container": "io.kubernetes.cri.container-name",
                               "image": "io.kubernetes.cri.image-name"})
_CRIO = ("run/containers/storage/overlay-containers/{id}/userdata/config.json", "annotations",
         {"namespace": "io.kubernetes.pod.namespace", "pod": "io.kubernetes.pod.name",
          "container": "io.kubernetes.container.name", "image": "io.kubernetes.cri-o.ImageName"})
_DOCKER = ("var/lib/docker/containers/{id}/config.v2.json", "Config.Labels",
           {"namespace": "io.kubernetes.pod.namespace", "pod": "io.kubernetes.pod.name",
            "container": "io.kubernetes.container.name"})
_RUNTIMES = (_CONTAINERD, _CRIO, _DOCKER)
#: Largest runtime config read (an OCI config.json is a few KiB to a few hundred KiB).
MAX_CONFIG_BYTES = 4 << 20


def pod_from_cgroup(cgroup: str) -> tuple[str | None, str | None]:
    """``(pod_uid, container_id)`` from a ``/proc/<pid>/cgroup`` text; ``(None, None)`` when
    the process is not in a kubepods cgroup. The UID is in its dashed form."""
    match = _POD_UID.search(cgroup)
    if not match:
        return None, None
    return match.group(1).replace("_", "-"), match.group(2)


def pod_info(root: Path, pid: int, env: dict[str, str] | None) -> tuple[dict | None, str | None]:
    """``({"namespace", "pod", "container", "pod_uid"}, image)`` of the pod ``pid`` runs in,
    or ``(None, None)`` when it is not in a pod. Unknown parts are None."""
    raw = procfs.read_bytes(root / "proc" / str(pid) / "cgroup")
    pod_uid, container_id = pod_from_cgroup(raw.decode("utf-8", "replace") if raw else "")
    env = env or {}
    if pod_uid is None and "KUBERNETES_SERVICE_HOST" not in env:
        return None, None
    found = _runtime_record(root, container_id) if container_id else {}
    info = {
        "namespace": _valid(found.get("namespace") or env.get("POD_NAMESPACE"), _LABEL),
        "pod": _valid(found.get("pod") or env.get("POD_NAME") or env.get("HOSTNAME"),
                      _SUBDOMAIN),
        "container": _valid(found.get("container"), _LABEL),
        "pod_uid": pod_uid,
    }
    return info, _valid(found.get("image"), _IMAGE)


def _valid(value: Any, pattern: re.Pattern[str]) -> str | None:
    return value if isinstance(value, str) and pattern.match(value) else None


def _runtime_record(root: Path, container_id: str) -> dict[str, str]:
    """Pod names from the first runtime that knows ``container_id``; {} when none does."""
    for path, section, keys in _RUNTIMES:
        data = procfs.read_bytes(root / path.format(id=container_id), limit=MAX_CONFIG_BYTES)
        if data is None:
            continue
        try:
            config = json.loads(data)
        except (ValueError, RecursionError):
            continue
        for part in section.split("."):
            config = config.get(part) if isinstance(config, dict) else None
        if isinstance(config, dict):
            return {name: config.get(key) for name, key in keys.items()}
    return {}


def pod_ipv4(root: Path, pid: int) -> str | None:
    """The first non-loopback local IPv4 address of ``pid``'s network namespace, read from
    ``/proc/<pid>/net/fib_trie`` (the ``/32 host LOCAL`` entries; the pod's IP for a pod
    network, a node address for a ``hostNetwork`` pod). None when unreadable."""
    raw = procfs.read_bytes(root / "proc" / str(pid) / "net/fib_trie", limit=4 << 20)
    if raw is None:
        return None
    last: str | None = None
    for line in raw.decode("ascii", "replace").splitlines():
        word = line.strip().lstrip("|-+` ").strip()
        if re.fullmatch(r"\d{1,3}(?:\.\d{1,3}){3}", word):
            last = word
        elif "/32 host LOCAL" in line and last and not last.startswith("127."):
            return last
    return None
