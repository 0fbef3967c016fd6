"""A simulated GPU node's filesystem: a ``/proc``-shaped tree plus files in mount namespaces.

The one fake node of the project: the demo fleet and the agent tests
(``tests/agent/fa_fakenode.py`` fixes its identity and start times) both build on it, and
it imports no Django. Processes are written the way the kernel shows them
(NUL-separated ``cmdline``, ``stat`` with ``starttime`` as field 22, ``environ``,
``exe``/``cwd``/``root`` links, ``fd`` socket links and ``net/tcp`` LISTEN rows,
``cgroup``), with the children a real
vLLM server has (``VLLM::EngineCore``, ``VLLM::Worker_TP<i>``, the spawn stub and the
multiprocessing resource tracker), so the real agent's discovery must pick out the API
servers. Servers can be stopped and restarted (a new pid and start time) and installed vLLM
versions replaced, which is what the demo timeline needs.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Clock ticks per second the kernel reports start times in (Linux USER_HZ).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SPAWN_STUB = "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=8)"
TRACKER = "from multiprocessing.resource_tracker import main;main(5)"


@dataclass
class ServerPids:
    """Pids of one simulated vLLM server and its children."""

    server: int
    engine: int
    children: list[int] = field(default_factory=list)
    #: the TP workers and the helper processes (tracker, spawn stub, forked copy) among
    #: ``children``, for tests that look at one kind
    workers: list[int] = field(default_factory=list)
    helpers: list[int] = field(default_factory=list)

    def all(self) -> list[int]:
        """Every pid of the server's process tree, the server first."""
        return [self.server, self.engine, *self.children]


class ProcNode:
    """Builds ``<root>/proc`` and friends. Paths in arguments are in-namespace paths.

    ``boot_time`` (Unix seconds) is written as ``btime``; process start times are given
    in Unix seconds and stored as clock ticks since boot, as the kernel does.
    """

    def __init__(self, root: Path, hostname: str, machine_id: str,
                 boot_time: float | None = None, clean: bool = True):
        self.root = root
        self.boot_time = int(boot_time if boot_time is not None else time.time() - 86400)
        self._inode = 70000
        self._pid = 1000
        if clean and root.exists():
            shutil.rmtree(root)  # a rebuilt node starts clean (simulator restart)
        (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "proc/stat").write_text(f"cpu  1 2 3 4\nbtime {self.boot_time}\n")
        (root / "proc/sys/kernel/hostname").write_text(hostname + "\n")
        (root / "proc/sys/kernel/osrelease").write_text("6.8.0-45-generic\n")
        (root / "etc/machine-id").write_text(machine_id + "\n")
        (root / "etc/os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
        self.add_process(1, 0, ["/sbin/init"])

    def new_pid(self) -> int:
        """A fresh pid (increasing, like the kernel's allocator between wraps)."""
        self._pid += 7
        return self._pid

    def ns_dir(self, ns: str | None) -> Path:
        """Host directory holding mount namespace ``ns`` (None = the host itself)."""
        path = self.root if ns is None else self.root / "containers" / ns
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_file(self, ns: str | None, path: str, content: bytes | str) -> Path:
        """Write a file at in-namespace ``path`` (parents created)."""
        target = self.ns_dir(ns) / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        return target

    def add_process(self, pid: int, ppid: int, argv: list[str], *, env: dict | None = None,
                    cwd: str = "/", exe: str | None = None, ns: str | None = None,
                    comm: str | None = None, started: float | None = None,
                    listen: tuple[int, ...] = (), cgroup: str = "0::/init.scope\n",
                    start_ticks: int | None = None, uid: int | None = None,
                    gid: int | None = None) -> Path:
        """Write ``proc/<pid>`` for one process started at Unix time ``started`` (or
        ``start_ticks`` clock ticks after boot, as ``stat`` field 22 holds it), running as
        ``uid``/``gid`` (default: this process's own, so files the caller writes are its)."""
        d = self.root / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        comm = comm or os.path.basename(argv[0])[:15]
        ticks = start_ticks if start_ticks is not None else int(
            max(0.0, (started or self.boot_time + 5) - self.boot_time) * CLK_TCK)
        tail = ["S", str(ppid)] + ["0"] * 17 + [str(ticks), "0", "0"]
        (d / "stat").write_text(f"{pid} ({comm}) {' '.join(tail)}\n")
        (d / "comm").write_text(comm + "\n")
        environ = b"".join(f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items())
        (d / "environ").write_bytes(environ)
        (d / "cgroup").write_text(cgroup)
        # The agent reads files named in argv with the process's uid/gid from `status`
        #: by default the simulated processes are the simulator's user.
        uid = os.getuid() if uid is None else uid
        gid = os.getgid() if gid is None else gid
        (d / "status").write_text(f"Name:\t{comm}\nPid:\t{pid}\nPPid:\t{ppid}\n"
                                  f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                  f"Gid:\t{gid}\t{gid}\t{gid}\t{gid}\nGroups:\t{gid}\n")
        os.symlink(exe or argv[0], d / "exe")
        os.symlink(cwd, d / "cwd")
        os.symlink(os.path.relpath(self.ns_dir(ns), d), d / "root")
        self._sockets(d, listen)
        return d

    def _sockets(self, d: Path, listen: tuple[int, ...]) -> None:
        (d / "fd").mkdir()
        (d / "net").mkdir()
        os.symlink("/dev/null", d / "fd" / "0")
        rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
                "   uid  timeout inode"]
        for i, port in enumerate(listen):
            self._inode += 1
            os.symlink(f"socket:[{self._inode}]", d / "fd" / str(10 + i))
            rows.append(f"   {i}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 "
                        f"00:00000000 00000000     0        0 {self._inode} 1 0000 100 0 0 10 0")
        # an established connection owned by someone else: not a listener of this pid
        rows.append("   9: 0100007F:9C40 0100007F:1F40 01 00000000:00000000 00:00000000 "
                    "00000000     0        0 99999 1 0000 20 4 30 10 -1")
        (d / "net" / "tcp").write_text("\n".join(rows) + "\n")
        (d / "net" / "tcp6").write_text(rows[0] + "\n")

    def add_vllm(self, argv: list[str], *, tp: int = 1, env: dict | None = None,
                 cwd: str = "/", exe: str = "/usr/bin/python3.12", ns: str | None = None,
                 listen: tuple[int, ...] = (8000,), cgroup: str = "0::/user.slice\n",
                 started: float | None = None, pid: int | None = None,
                 forked_copy: bool = False, engine_pid: int | None = None,
                 worker_pids: list[int] | None = None, uid: int | None = None,
                 gid: int | None = None) -> ServerPids:
        """A vLLM API server with its EngineCore, TP workers (TP > 1) and helpers.

        ``pid``/``engine_pid``/``worker_pids`` pin pids (else fresh ones); ``forked_copy``
        adds a forked child still showing the server's argv (discovery must skip it).
        """
        spid = pid or self.new_pid()
        self.add_process(spid, 1, argv, env=env, cwd=cwd, exe=exe, ns=ns, listen=listen,
                         cgroup=cgroup, started=started, uid=uid, gid=gid,
                         start_ticks=self.server_start_ticks(spid, started))
        pids = ServerPids(server=spid, engine=engine_pid or self.new_pid())
        worker_pids = list(worker_pids or [])
        tracker = self.new_pid()
        self.add_process(tracker, spid, [argv[0], "-c", TRACKER], exe=exe, ns=ns, cgroup=cgroup,
                         started=started)
        self.add_process(pids.engine, spid, ["VLLM::EngineCore"], exe=exe, ns=ns,
                         comm="VLLM::EngineCor", cgroup=cgroup, started=started)
        stub = self.new_pid()
        self.add_process(stub, pids.engine, [argv[0], "-c", SPAWN_STUB, "--multiprocessing-fork"],
                         exe=exe, ns=ns, cgroup=cgroup, started=started)
        pids.helpers += [tracker, stub]
        for rank in range(tp if tp > 1 else 0):
            worker = worker_pids.pop(0) if worker_pids else self.new_pid()
            self.add_process(worker, pids.engine, [f"VLLM::Worker_TP{rank}"], exe=exe, ns=ns,
                             comm=f"VLLM::Worker_TP{rank}"[:15], cgroup=cgroup, started=started)
            pids.workers.append(worker)
        if forked_copy:  # a forked child that still shows the parent's argv
            copy = self.new_pid()
            self.add_process(copy, spid, argv, exe=exe, ns=ns, cgroup=cgroup, started=started)
            pids.helpers.append(copy)
        pids.children += [*pids.helpers[:2], *pids.workers, *pids.helpers[2:]]
        return pids

    def server_start_ticks(self, pid: int, started: float | None) -> int | None:
        """Start ticks of a server process, None to derive them from ``started``."""
        return None

    def remove(self, pids: ServerPids) -> None:
        """The server and its children exit (their ``proc`` entries vanish)."""
        for pid in pids.all():
            shutil.rmtree(self.root / "proc" / str(pid), ignore_errors=True)

    def install_vllm(self, ns: str | None, prefix: str, version: str,
                     site: str = "lib/python3.12/site-packages", replace: bool = True) -> None:
        """Put ``vllm-<version>.dist-info`` under ``prefix``; with ``replace`` (a pip install)
        it becomes the only vLLM dist-info there."""
        site_dir = self.ns_dir(ns) / prefix.lstrip("/") / site
        for old in site_dir.glob("vllm-*.dist-info") if replace and site_dir.is_dir() else []:
            shutil.rmtree(old)
        self.write_file(ns, f"{prefix}/{site}/vllm-{version}.dist-info/METADATA",
                        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n\nvLLM\n")

    def docker_container(self, container_id: str, image: str | None,
                         ports: dict[int, int] | None = None) -> str:
        """Docker's ``config.v2.json`` for a container; returns its cgroup line."""
        config = {"ID": container_id, "Image": "sha256:" + "ab" * 32,
                  "Config": {"Image": image} if image else {},
                  "NetworkSettings": {"Ports": {
                      f"{c}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(h)}]  # noqa: S104
                      for c, h in (ports or {}).items()}}}
        self.write_file(None, f"/var/lib/docker/containers/{container_id}/config.v2.json",
                        json.dumps(config))
        return f"0::/system.slice/docker-{container_id}.scope\n"

    def kube_container(self, container_id: str, pod_uid: str, *, namespace: str, pod: str,
                       container: str, image: str, runtime: str = "containerd",
                       driver: str = "systemd", qos: str = "burstable") -> str:
        """A Kubernetes container as the node shows it: the runtime's record of the pod names
        (containerd's OCI bundle ``config.json`` annotations or CRI-O's ``userdata/config.json``)
        and the process's cgroup line for the kubelet's cgroup ``driver`` (``systemd`` or
        ``cgroupfs``, cgroup v2); returns that line."""
        if runtime == "containerd":
            path = (f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{container_id}/"
                    "config.json")
            notes = {"io.kubernetes.cri.sandbox-namespace": namespace,
                     "io.kubernetes.cri.sandbox-name": pod,
                     "io.kubernetes.cri.container-name": container,
                     "io.kubernetes.cri.image-name": image}
        else:
            path = f"/run/containers/storage/overlay-containers/{container_id}/userdata/config.json"
            notes = {"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": pod,
                     "io.kubernetes.container.name": container,
                     "io.kubernetes.cri-o.ImageName": image}
        self.write_file(None, path, json.dumps({"ociVersion": "1.0.2", "annotations": notes}))
        if driver == "cgroupfs":
            return f"0::/kubepods/{qos}/pod{pod_uid}/{container_id}\n"
        prefix = "cri-containerd" if runtime == "containerd" else "crio"
        slice_uid = pod_uid.replace("-", "_")
        return (f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slice_uid}.slice/"
                f"{prefix}-{container_id}.scope\n")

    def pod_network(self, pid: int, ip: str) -> None:
        """``/proc/<pid>/net/fib_trie`` of a pod network namespace whose address is ``ip``."""
        text = ("Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n"
                f"     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n"
                f"     |-- {ip}\n        /32 host LOCAL\n")
        (self.root / "proc" / str(pid) / "net").mkdir(parents=True, exist_ok=True)
        (self.root / "proc" / str(pid) / "net" / "fib_trie").write_text(text)

    def hf_snapshot(self, ns: str | None, cache: str, repo: str, commit: str,
                    files: dict[str, str | bytes], ref: str = "main") -> None:
        """An HF hub cache entry: ``refs/<ref>`` -> ``snapshots/<commit>/<files>``."""
        base = f"{cache}/models--{repo.replace('/', '--')}"
        self.write_file(ns, f"{base}/refs/{ref}", commit)
        for name, content in files.items():
            self.write_file(ns, f"{base}/snapshots/{commit}/{name}", content)
