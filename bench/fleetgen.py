"""Synthetic fleet generator for the dashboard benchmark and the dashboard tests.

Writes real-shaped rows with ``bulk_create`` (no API round trips, so 10,000 hosts,
30,000 servers and 200,000 findings load in about a minute on PostgreSQL):
hosts with labels and GPUs, running vLLM servers with argv/model ids/versions,
active findings drawn from the loaded knowledge base's rules, and metric/GPU
samples (``backfill``). Every generated host has a ``machine_id`` starting with
``gen-`` so :func:`clear` removes exactly what was generated.

Values are illustrative, not measurements: KV usage follows a daily sine with noise,
TTFT/TPOT scale with load, draft acceptance hovers around the seed baseline.
Import only after Django is set up (``bench/dashboard.py`` does it).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

if __name__ == "__main__":  # `make bench` runs every bench/*.py; this one is a library
    print("bench/fleetgen.py is the data generator of bench/dashboard.py: run that instead.")
    sys.exit(0)

from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from audit.models import Finding  # noqa: E402
from audit.rulebook import current_knowledge_base  # noqa: E402
from fleet.models import Gpu, GpuSample, Host, MetricSample, Server  # noqa: E402

PREFIX = "gen-"
VERSIONS = ("0.25.1", "0.26.0", "0.27.0", "0.28.1", "0.29.0", "0.30.0", "0.31.0rc1")
MODELS = ("google/gemma-4-31B-it", "google/gemma-4-26B-A4B-it",
          "cyankiwi/gemma-4-31B-it-AWQ-4bit", "RedHatAI/gemma-4-31B-it-NVFP4")
GPUS = (("NVIDIA H100 80GB HBM3", 85520809984, 700.0), ("NVIDIA H200", 150754820096, 700.0),
        ("NVIDIA GeForce RTX 5090", 34190917632, 575.0), ("NVIDIA L40S", 48305799168, 350.0))
SEVERITY_WEIGHTS = {"critical": 1, "high": 6, "medium": 20, "low": 25, "info": 48}
BATCH = 5000
#: More GPU samples than this in a window means the window was already backfilled.
GPU_SAMPLES_FROM_INGEST = 20


def _chunks(rows: list, size: int = BATCH) -> Iterable[list]:
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def make_hosts(start: int, stop: int, rng: random.Random, now: datetime) -> list[Host]:
    """Hosts ``gen-{start}`` .. ``gen-{stop-1}``; about 4% stale and 2% offline."""
    hosts = []
    for i in range(start, stop):
        roll = rng.random()
        age = 10 if roll > 0.06 else (200 if roll > 0.02 else 7200)
        hosts.append(Host(
            machine_id=f"{PREFIX}{i:06d}", hostname=f"gpu-{i // 1000:02d}-{i % 1000:03d}",
            labels={"env": rng.choice(("prod", "prod", "staging")),
                    "rack": f"r{i // 40:03d}"},
            last_seen=now - timedelta(seconds=age + rng.random() * 5),
            last_collected_at=now - timedelta(seconds=age), agent_version="0.1.0",
            agent_interval_s=30, os="Ubuntu 22.04.5 LTS", kernel="5.15.0",
            nvidia_driver_version="580.95.05", cuda_driver_version="13.0"))
    return hosts


def _server(host: Host, port: int, rng: random.Random, now: datetime) -> Server:
    version = rng.choice(VERSIONS)
    installed = version if rng.random() > 0.05 else rng.choice(VERSIONS)
    model = rng.choice(MODELS)
    argv = ["vllm", "serve", model, "--port", str(port), "--max-model-len", "65536",
            "--gpu-memory-utilization", "0.92"]
    return Server(host=host, identity=f"port:{port}", base_url=f"http://127.0.0.1:{port}",
                  pid=1000 + port, started_at=now - timedelta(hours=rng.randint(1, 400)),
                  argv=argv, vllm_version=version, installed_vllm_version=installed,
                  model_ids=[model], max_model_len=65536, first_seen=now - timedelta(days=30),
                  last_seen=now, is_running=True)


def make_servers_and_gpus(hosts: list[Host], per_host: int, rng: random.Random,
                          now: datetime) -> tuple[list[Server], list[Gpu]]:
    """``per_host`` servers (ports 8000..) and ``per_host`` GPUs of one model per host."""
    servers, gpus = [], []
    for host in hosts:
        name, memory, power = rng.choice(GPUS)
        for i in range(per_host):
            servers.append(_server(host, 8000 + i, rng, now))
            gpus.append(Gpu(host=host, uuid=f"GPU-{host.machine_id}-{i}", index=i, name=name,
                            memory_total_bytes=memory, memory_used_bytes=int(memory * 0.9),
                            utilization_pct=rng.uniform(40, 99), temperature_c=rng.uniform(45, 80),
                            power_draw_w=power * rng.uniform(0.4, 0.95), power_limit_w=power,
                            compute_capability="9.0"))
    return servers, gpus


def make_findings(servers: list[Server], count: int, rng: random.Random,
                  now: datetime) -> list[Finding]:
    """``count`` active findings spread over ``servers`` (one per (server, rule) at most,
    as the unique constraint requires), rules and severities from the loaded KB."""
    rules = current_knowledge_base().rules
    by_severity: dict[str, list] = {}
    for rule in rules:
        by_severity.setdefault(rule.severity, []).append(rule)
    severities = [s for s in SEVERITY_WEIGHTS if s in by_severity]
    weights = [SEVERITY_WEIGHTS[s] for s in severities]
    findings, used = [], set()
    attempts = 0
    while len(findings) < count and attempts < count * 5:
        attempts += 1
        server = servers[rng.randrange(len(servers))]
        rule = rng.choice(by_severity[rng.choices(severities, weights)[0]])
        if (server.pk, rule.id) in used:
            continue
        used.add((server.pk, rule.id))
        findings.append(Finding(
            host_id=server.host_id, server=server, rule_id=rule.id, kind=rule.kind,
            severity=rule.severity, title=rule.title[:300],
            message=f"{rule.title} (generated)", remediation=rule.remediation,
            references=list(rule.references), evidence={"generated": True},
            first_seen=now - timedelta(hours=rng.randint(1, 300)), last_seen=now))
    return findings


def generate(hosts: int, servers_per_host: int = 3, findings_per_host: float = 20,
             spark_hosts: int = 200, seed: int = 1) -> dict[str, int]:
    """Grow the generated fleet to ``hosts`` hosts (existing ``gen-`` hosts are kept, so
    a benchmark can measure at 1/10 scale, then grow), adding ``findings_per_host`` active
    findings per new host (20 = 200,000 findings on 10,000 hosts, the dashboard's sizing). The first
    ``spark_hosts`` new hosts get one hour of one-minute samples for the overview
    sparkline. Returns what was added."""
    rng = random.Random(seed + hosts)
    now = timezone.now()
    have = Host.objects.filter(machine_id__startswith=PREFIX).count()
    if have >= hosts:
        return {"hosts": 0, "servers": 0, "findings": 0}
    with transaction.atomic():
        new_hosts = make_hosts(have, hosts, rng, now)
        for chunk in _chunks(new_hosts):
            Host.objects.bulk_create(chunk)
        new_hosts = list(Host.objects.filter(machine_id__in=[h.machine_id for h in new_hosts]))
        servers, gpus = make_servers_and_gpus(new_hosts, servers_per_host, rng, now)
        for chunk in _chunks(servers):
            Server.objects.bulk_create(chunk)
        for chunk in _chunks(gpus):
            Gpu.objects.bulk_create(chunk)
        servers = list(Server.objects.filter(host__in=new_hosts).only("pk", "host_id"))
        share = math.ceil(findings_per_host * len(new_hosts))
        rows = make_findings(servers, share, rng, now)
        for chunk in _chunks(rows):
            Finding.objects.bulk_create(chunk)
        spark = [s for s in servers if s.host_id in {h.pk for h in new_hosts[:spark_hosts]}]
        samples = [sample for s in spark for sample in metric_samples(
            s.pk, now - timedelta(hours=1), now, 60, rng)]
        for chunk in _chunks(samples):
            MetricSample.objects.bulk_create(chunk)
    return {"hosts": len(new_hosts), "servers": len(servers), "findings": len(rows)}


def metric_samples(server_id: int, start: datetime, end: datetime, step_s: int,
                   rng: random.Random, missing: tuple[str, ...] = (),
                   gap: tuple[datetime, datetime] | None = None,
                   spec_rate: float | None = None) -> list[MetricSample]:
    """MetricSample rows every ``step_s`` seconds from ``start`` to ``end``.

    ``missing`` names canonical metrics the simulated exposition lacks (e.g. ``ttft``):
    their columns stay null and ``extra["missing"]`` lists them, as ingest records it.
    ``gap`` = (from, to) leaves a hole (agent down). ``spec_rate`` adds a draft
    acceptance rate around that value.
    """
    rows, ts = [], start
    while ts <= end:
        if gap is None or not (gap[0] <= ts < gap[1]):
            rows.append(_sample(server_id, ts, step_s, rng, missing, spec_rate))
        ts += timedelta(seconds=step_s)
    return rows


def _sample(server_id: int, ts: datetime, step_s: int, rng: random.Random,
            missing: tuple[str, ...], spec_rate: float | None) -> MetricSample:
    day = (ts.hour * 3600 + ts.minute * 60) / 86400
    load = max(0.05, 0.55 + 0.35 * math.sin(2 * math.pi * (day - 0.3)) + rng.gauss(0, 0.05))
    running = round(load * 48)
    values: dict[str, Any] = {
        "kv_cache_usage": min(1.0, load * 0.9 + rng.gauss(0, 0.02)),
        "requests_running": float(running),
        "requests_waiting": float(max(0, round((load - 0.8) * 60))),
        "generation_tps": running * rng.uniform(28, 34),
        "prompt_tps": running * rng.uniform(300, 420),
        "ttft_p50_s": 0.08 + load * 0.25, "ttft_p99_s": 0.3 + load * 1.6 * rng.uniform(0.8, 1.3),
        "tpot_p50_s": 0.02 + load * 0.012, "tpot_p99_s": 0.04 + load * 0.05,
        "preemptions": float(rng.random() < 0.01 and rng.randint(1, 5)),
    }
    if "ttft" in missing:
        values["ttft_p50_s"] = values["ttft_p99_s"] = None
    if "tpot" in missing:
        values["tpot_p50_s"] = values["tpot_p99_s"] = None
    if spec_rate is not None:
        values["spec_acceptance_rate"] = max(0.0, min(1.0, spec_rate + rng.gauss(0, 0.03)))
    return MetricSample(server_id=server_id, ts=ts, window_s=float(step_s), window_kind="delta",
                        extra={"missing": list(missing), "generated": True}, **values)


def gpu_samples(gpu: Gpu, start: datetime, end: datetime, step_s: int,
                rng: random.Random) -> list[GpuSample]:
    """GpuSample rows (memory, utilisation, temperature, power) every ``step_s`` s."""
    rows, ts = [], start
    total = gpu.memory_total_bytes or 80 * 2**30
    limit = gpu.power_limit_w or 700.0
    while ts <= end:
        load = 0.55 + 0.35 * math.sin(2 * math.pi * ((ts.hour * 60 + ts.minute) / 1440 - 0.3))
        rows.append(GpuSample(gpu=gpu, ts=ts, memory_used_bytes=int(total * 0.92),
                              utilization_pct=min(100.0, load * 100 + rng.gauss(0, 3)),
                              temperature_c=45 + load * 30,
                              power_draw_w=limit * (0.3 + 0.6 * load)))
        ts += timedelta(seconds=step_s)
    return rows


def backfill(host: Host, hours: float = 24, step_s: int = 30, seed: int = 7,
             missing: tuple[str, ...] = (), spec_rate: float | None = None,
             gap: tuple[datetime, datetime] | None = None) -> int:
    """Metric samples for every running server and GPU samples for every GPU of
    ``host`` over the last ``hours`` (none inside ``gap``, the agent being down then);
    returns the number of rows written. A server or GPU that already has generated
    samples in the window is skipped, so seeding a demo twice does not double it."""
    rng = random.Random(seed)
    end = timezone.now()
    start = end - timedelta(hours=hours)
    written = 0
    for server in host.servers.filter(is_running=True):
        if server.samples.filter(ts__gte=start, extra__generated=True).exists():
            continue
        rows = metric_samples(server.pk, start, end, step_s, rng, missing, gap, spec_rate)
        MetricSample.objects.bulk_create(rows, batch_size=BATCH)
        written += len(rows)
    for gpu in host.gpus.filter(is_present=True):
        # GpuSample has no marker: more rows than a short demo ingest makes = generated.
        if gpu.samples.filter(ts__gte=start).count() > GPU_SAMPLES_FROM_INGEST:
            continue
        rows = [r for r in gpu_samples(gpu, start, end, step_s, rng)
                if gap is None or not gap[0] <= r.ts < gap[1]]
        GpuSample.objects.bulk_create(rows, batch_size=BATCH)
        written += len(rows)
    return written


def clear() -> int:
    """Delete every generated host (cascades to its servers, GPUs, samples, findings)."""
    deleted, _ = Host.objects.filter(machine_id__startswith=PREFIX).delete()
    return deleted
