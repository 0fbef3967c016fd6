"""A real Alertmanager on loopback for the alert tests (Debian's ``prometheus-alertmanager``).

:func:`start_alertmanager` runs the binary with a config that routes everything to a
receiver that notifies nobody (the tests read state from ``GET /api/v2/alerts``), no
clustering, its own storage directory, and optionally a ``--web.config.file`` (TLS, basic
auth: https://prometheus.io/docs/prometheus/latest/configuration/https/).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alertkit import free_port
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CONFIG = 'route: {receiver: "null", group_wait: 1h}\nreceivers: [{name: "null"}]\n'
INSTALL = "apt-get install -y prometheus-alertmanager (.ci/run installs it)"


def binary() -> str:
    """The Alertmanager binary (Debian names it prometheus-alertmanager). A missing one
    is a failure naming the package, never a skip."""
    found = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
    if not found:
        raise RuntimeError(f"no Alertmanager binary on PATH: {INSTALL}")
    return found


class Alertmanager:
    """A running Alertmanager: ``url`` its base URL; :meth:`alerts` its active alerts."""

    def __init__(self, url: str, context: ssl.SSLContext | None = None,
                 auth: str = "") -> None:
        self.url, self.context, self.auth = url, context, auth

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """Active alerts (Alertmanager's API drops those past their ``endsAt``) whose
        labels include every given pair."""
        request = urllib.request.Request(self.url + "/api/v2/alerts")
        if self.auth:
            request.add_header("Authorization", self.auth)
        with urllib.request.urlopen(request, timeout=5, context=self.context) as answer:
            found = json.load(answer)
        return [a for a in found if all(a["labels"].get(k) == v for k, v in labels.items())]


@contextmanager
def start_alertmanager(tmp: Path, web_config: str = "",
                       context: ssl.SSLContext | None = None,
                       auth: str = "", config: str = CONFIG) -> Iterator[Alertmanager]:
    """Run Alertmanager (``config``: its YAML) until the block ends; ready (``/-/ready``)
    when it is entered."""
    (tmp / "alertmanager.yml").write_text(config)
    port = free_port()
    argv = [binary(), f"--config.file={tmp / 'alertmanager.yml'}",
            f"--storage.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address="]
    if web_config:
        (tmp / "web.yml").write_text(web_config)
        argv.append(f"--web.config.file={tmp / 'web.yml'}")
    scheme = "https" if context is not None else "http"
    log = (tmp / "alertmanager.log").open("wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    manager = Alertmanager(f"{scheme}://127.0.0.1:{port}", context, auth)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                request = urllib.request.Request(manager.url + "/-/ready")
                if auth:
                    request.add_header("Authorization", auth)
                urllib.request.urlopen(request, timeout=1, context=context).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("Alertmanager did not start: "
                                       + (tmp / "alertmanager.log").read_text()[-2000:]) \
                        from None
                time.sleep(0.1)
        yield manager
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def self_signed(name: str = "127.0.0.1") -> tuple[str, str]:
    """``(certificate_pem, key_pem)`` of a fresh self-signed certificate for an IP name,
    usable as its own CA (basic constraints CA, one day)."""
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(name))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem
