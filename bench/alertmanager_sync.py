"""Benchmark: an Alertmanager channel's sync at fleet size, into a real Alertmanager.

Run: ``.venv/bin/python bench/alertmanager_sync.py [--hosts 2000] [--findings-per-host 5]``
(needs PostgreSQL, and Debian's ``prometheus-alertmanager`` on PATH). Creates the hosts and
open findings in a bench database, starts Alertmanager on loopback, then prints the time of
the first sync (every finding fires: the backfill when a channel is created) and of a
re-send one interval later (what the beat does every ``ALERTMANAGER_RESEND_S`` while the
findings stay open), and how many alerts Alertmanager holds. No assertion is made (speed
targets are not tests); the sync must stay well inside the resend interval (60 s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_database, bench_env, free_port, setup_django  # noqa: E402


def start_alertmanager(folder: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
    if not binary:
        sys.exit("no Alertmanager binary: apt-get install -y prometheus-alertmanager")
    (folder / "am.yml").write_text('route: {receiver: "null"}\nreceivers: [{name: "null"}]\n')
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={folder}/am.yml",
                             f"--storage.path={folder}/data", "--cluster.listen-address=",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1).close()  # noqa: S310 - http loopback
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("Alertmanager did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--findings-per-host", type=int, default=5)
    args = parser.parse_args()
    with bench_database("fleet_bench_am_sync") as db_url, \
            tempfile.TemporaryDirectory() as tmp:
        setup_django(bench_env(db_url, ALERTS_ALLOW_PRIVATE_WEBHOOKS="true"))
        from django.utils import timezone

        from alerts.alertmanager_sync import sync_channel
        from alerts.models import AlertChannel
        from audit.models import Finding
        from fleet.models import Host, Server

        now = timezone.now()
        hosts = Host.objects.bulk_create(
            [Host(machine_id=f"bench-am-{i}", hostname=f"gpu-{i:05d}", last_seen=now,
                  agent_interval_s=30, labels={"env": "prod", "team": f"t{i % 7}"})
             for i in range(args.hosts)], batch_size=1000)
        servers = Server.objects.bulk_create(
            [Server(host=h, identity="port:8000", pid=1) for h in hosts], batch_size=1000)
        Finding.objects.bulk_create(
            [Finding(host=s.host, server=s, rule_id=f"bench-rule-{j}", kind="known_issue",
                     severity="high", title=f"bench rule {j}", message="bench")
             for s in servers for j in range(args.findings_per_host)], batch_size=1000)
        proc, url = start_alertmanager(Path(tmp))
        try:
            channel = AlertChannel.objects.create(kind="alertmanager", name="bench",
                                                  destination=url, min_severity="high")
            started = time.perf_counter()
            first = sync_channel(channel.pk)
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            again = sync_channel(channel.pk, now=timezone.now() + timedelta(seconds=45))
            again_s = time.perf_counter() - started
            alerts = url + "/api/v2/alerts?silenced=false"  # http loopback, built above
            with urllib.request.urlopen(alerts, timeout=30) as r:  # noqa: S310
                held = len(json.load(r))
        finally:
            proc.terminate()
            proc.wait(10)
        print(f"alertmanager sync, {args.hosts} hosts x {args.findings_per_host} findings")
        print(f"  first sync (backfill): {first.firing} alerts in {first_s:.2f} s "
              f"{first.error or ''}")
        print(f"  re-send:               {again.firing} alerts in {again_s:.2f} s "
              f"{again.error or ''}")
        print(f"  Alertmanager holds {held} active alerts")


if __name__ == "__main__":
    main()
