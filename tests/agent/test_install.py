"""The install script: POSIX syntax, a dry run in a temporary root, rendering safety."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fleet_agent import installer

WHEEL = "vllm_fleet_agent-0.1.0-py3-none-any.whl"
WHEEL_BYTES = b"PK\x03\x04 the agent wheel as served"
WHEEL_SHA256 = hashlib.sha256(WHEEL_BYTES).hexdigest()
LOCK = "vllm_fleet_agent-0.1.0-requirements.lock"
LOCK_BYTES = b"httpx==0.28.1 \\\n    --hash=sha256:" + b"0" * 64 + b"\n"
LOCK_SHA256 = hashlib.sha256(LOCK_BYTES).hexdigest()


def _render(tmp_path: Path, sha256: str | None = WHEEL_SHA256,
            lock_sha256: str | None = LOCK_SHA256) -> Path:
    script = tmp_path / "install.sh"
    script.write_text(installer.render_install_script("https://fleet.example.com/", WHEEL,
                                                      sha256, lock_name=LOCK,
                                                      lock_sha256=lock_sha256))
    return script


def _fake_curl(tmp_path: Path, served: bytes, lock: bytes = LOCK_BYTES) -> Path:
    """A ``curl`` on PATH that logs its arguments and writes ``served`` (for the wheel's URL)
    or ``lock`` (for the lock's) to ``-o <file>``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "served.whl").write_bytes(served)
    (tmp_path / "served.lock").write_bytes(lock)
    curl = bindir / "curl"
    curl.write_text("#!/bin/sh\n"
                    f'echo "$@" >> "{tmp_path}/curl.log"\n'
                    'out=""; src=""\n'
                    'while [ $# -gt 0 ]; do\n'
                    '  case "$1" in -o) out="$2";; *.whl) src=whl;; *.lock) src=lock;; esac\n'
                    '  shift\ndone\n'
                    f'cp "{tmp_path}/served.$src" "$out"\n')
    curl.chmod(0o755)
    return bindir


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
def test_the_script_parses_as_posix_sh(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    subprocess.run([shell, "-n", str(_render(tmp_path))], check=True)


def _dry_run(tmp_path: Path, *args: str, secret: str | None = "s3cret-value",  # noqa: S107 - test value
             served: bytes = WHEEL_BYTES, sha256: str | None = WHEEL_SHA256,
             lock: bytes = LOCK_BYTES, lock_sha256: str | None = LOCK_SHA256,
             ) -> subprocess.CompletedProcess:
    path = f"{_fake_curl(tmp_path, served, lock)}:{os.environ['PATH']}"
    env = {"PATH": path, "PREFIX": str(tmp_path / "root"), "DRY_RUN": "1"}
    if secret:
        env["FLEET_ENROLL_SECRET"] = secret
    return subprocess.run(["sh", str(_render(tmp_path, sha256, lock_sha256)), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_dry_run_installs_the_wheel_from_the_dashboard_and_writes_the_unit(tmp_path):
    out = _dry_run(tmp_path)
    assert out.returncode == 0, out.stderr
    fetched = (tmp_path / "curl.log").read_text()
    assert f"https://fleet.example.com/agent/dist/{WHEEL}" in fetched
    assert f"https://fleet.example.com/agent/dist/{LOCK}" in fetched
    assert "wheel sha256 verified" in out.stderr
    assert "dependency lock sha256 verified" in out.stderr
    pips = [line for line in out.stdout.splitlines() if "/opt/fleet-agent/bin/pip " in line]
    # Pinned, hash-checked dependencies first; then the agent alone, pulling nothing unpinned.
    assert len(pips) == 2
    assert "--require-hashes --only-binary :all: -r " in pips[0]
    assert pips[0].split()[-1].endswith(f"/{LOCK}")
    assert "--no-deps" in pips[1] and pips[1].endswith(f"/{WHEEL}")
    assert "+ /opt/fleet-agent/bin/fleet-agent enroll --server https://fleet.example.com" \
        in out.stdout
    assert "+ systemctl enable --now fleet-agent.service" in out.stdout
    assert "s3cret-value" not in out.stdout + out.stderr
    unit = (tmp_path / "root/etc/systemd/system/fleet-agent.service").read_text()
    assert "User=fleet-agent" in unit
    assert "AmbientCapabilities=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH" in unit
    assert "ExecStart=/opt/fleet-agent/bin/fleet-agent run --config /etc/fleet-agent/config.toml" \
        in unit
    assert (tmp_path / "root/var/lib/fleet-agent/spool").is_dir()
    assert (tmp_path / "root/var/lib/fleet-agent/spool").stat().st_mode & 0o077 == 0


def test_it_refuses_to_run_without_an_enrollment_secret(tmp_path):
    out = _dry_run(tmp_path, secret=None)
    assert out.returncode == 1 and "FLEET_ENROLL_SECRET_FILE" in out.stderr


def test_uninstall_removes_what_install_wrote(tmp_path):
    assert _dry_run(tmp_path).returncode == 0
    out = _dry_run(tmp_path, "--uninstall", secret=None)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "root/etc/systemd/system/fleet-agent.service").exists()
    assert not (tmp_path / "root/var/lib/fleet-agent").exists()
    assert "+ systemctl disable --now fleet-agent.service" in out.stdout
    assert "+ /opt/fleet-agent/bin/fleet-agent revoke --config /etc/fleet-agent/config.toml" \
        in out.stdout  # the host's token dies with the install


def test_the_secret_file_reaches_the_agent_by_path_never_by_value(tmp_path):
    secret_file = tmp_path / "fleet-enroll.secret"
    secret_file.write_text("fes_file-secret\n")
    env = {"PATH": f"{_fake_curl(tmp_path, WHEEL_BYTES, LOCK_BYTES)}:{os.environ['PATH']}",
           "PREFIX": str(tmp_path / "root"), "DRY_RUN": "1",
           "FLEET_ENROLL_SECRET_FILE": str(secret_file)}
    out = subprocess.run(["sh", str(_render(tmp_path, WHEEL_SHA256))], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"--secret-file {secret_file}" in out.stdout
    assert "fes_file-secret" not in out.stdout + out.stderr


def test_an_unfilled_template_refuses_to_run(tmp_path):
    script = tmp_path / "raw.sh"
    script.write_text(installer.install_script_template())
    out = subprocess.run(["sh", str(script)], env={"PATH": os.environ["PATH"], "DRY_RUN": "1",
                                                   "PREFIX": str(tmp_path / "r"),
                                                   "FLEET_ENROLL_SECRET": "x"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "site URL" in out.stderr


def test_a_dry_run_without_a_scratch_root_refuses(tmp_path):
    out = subprocess.run(["sh", str(_render(tmp_path))], env={"PATH": os.environ["PATH"],
                                                              "DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "PREFIX" in out.stderr


@pytest.mark.parametrize("url", ["https://x.example/$(reboot)", "https://a b", "ftp://x",
                                 "https://x.example/'; rm -rf /"])
def test_rendering_rejects_urls_that_could_inject_shell(url):
    with pytest.raises(ValueError):
        installer.render_install_script(url, WHEEL)


def test_the_one_liner_passes_the_secret_in_a_private_file_not_in_argv():
    line = installer.one_liner("https://fleet.example.com", "abc-123")
    assert line == ("(umask 077 && printf '%s\\n' 'abc-123' > fleet-enroll.secret) && "
                    "curl -fsSL https://fleet.example.com/agent/install.sh | "
                    'sudo FLEET_ENROLL_SECRET_FILE="$PWD/fleet-enroll.secret" sh; '
                    "rm -f fleet-enroll.secret")


def test_a_wheel_that_does_not_match_the_embedded_sha256_is_not_installed(tmp_path):
    out = _dry_run(tmp_path, served=WHEEL_BYTES + b" tampered")
    assert out.returncode == 1
    assert "sha256 mismatch" in out.stderr and "not installing" in out.stderr
    assert "pip install" not in out.stdout and "enroll" not in out.stdout


def test_a_script_without_a_wheel_digest_refuses_to_install(tmp_path):
    out = _dry_run(tmp_path, sha256=None)
    assert out.returncode == 1 and "sha256" in out.stderr
    assert "pip install" not in out.stdout


def test_a_lock_that_does_not_match_the_embedded_sha256_changes_nothing(tmp_path):
    out = _dry_run(tmp_path, lock=LOCK_BYTES + b"evil==6.6.6\n")
    assert out.returncode == 1
    assert f"sha256 mismatch for {LOCK}" in out.stderr and "not installing" in out.stderr
    assert out.stdout == ""  # no useradd, venv, pip or enroll, not even printed
    assert not (tmp_path / "root").exists()


def test_a_script_without_a_lock_digest_refuses_to_install(tmp_path):
    out = _dry_run(tmp_path, lock_sha256=None)
    assert out.returncode == 1 and "dependency lock sha256" in out.stderr
    assert "pip install" not in out.stdout


@pytest.mark.parametrize("digest", ["A" * 64, "0" * 63, "$(reboot)" + "0" * 55])
def test_rendering_rejects_a_malformed_digest(digest):
    with pytest.raises(ValueError):
        installer.render_install_script("https://fleet.example.com", WHEEL, digest)
