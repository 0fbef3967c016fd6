"""The agent's dependency lock (fleet_agent/requirements.lock, ``make agent-lock``).

install.sh installs it with ``pip install --require-hashes`` and then the wheel with
``--no-deps``, so a dependency missing from the lock breaks every install and a pin outside
pyproject's range runs the agent on a version it never declared. The offline tests read the
lock and pyproject.toml with ``packaging``; the ``slow`` ones ask the package index (pip's
configured one) for each pinned wheel's metadata and resolve the closure against the lock.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "fleet_agent" / "requirements.lock"
#: What the agent supports: pyproject's requires-python (>= 3.10) up to the newest CPython
#: the pinned wheels are built for, on x86_64 and aarch64 Linux (GPU nodes).
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
MACHINES = ("x86_64", "aarch64")


def _environment(python: str, machine: str) -> dict[str, str]:
    """A PEP 508 marker environment of CPython ``python`` on Linux ``machine``."""
    return {"python_version": python, "python_full_version": f"{python}.0",
            "platform_machine": machine, "sys_platform": "linux", "platform_system": "Linux",
            "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "platform_release": "",
            "platform_version": "", "implementation_version": f"{python}.0", "extra": ""}


ENVIRONMENTS = [(p, m) for p in PYTHONS for m in MACHINES]


def _lock_lines() -> list[tuple[Requirement, list[str]]]:
    """Each requirement of the lock with its ``--hash=sha256:`` digests (comments dropped)."""
    text = re.sub(r"\\\n", " ", LOCK.read_text())
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        hashes = re.findall(r"--hash=sha256:(\S+)", line)
        out.append((Requirement(re.sub(r"--hash=\S+", "", line).strip()), hashes))
    return out


def _pins(env: dict[str, str]) -> dict[str, Version]:
    """``{canonical name: pinned version}`` of the lock lines whose marker holds in ``env``."""
    pins: dict[str, Version] = {}
    for req, _ in _lock_lines():
        if req.marker is None or req.marker.evaluate(env):
            name = canonicalize_name(req.name)
            assert name not in pins, f"{name} pinned twice for {env['python_version']}"
            pins[name] = Version(next(iter(req.specifier)).version)
    return pins


def _declared() -> list[Requirement]:
    """pyproject.toml's ``[project] dependencies`` (what the agent wheel declares)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(dep) for dep in project["dependencies"]]


def test_every_line_is_an_exact_pin_with_sha256_hashes():
    lines = _lock_lines()
    assert lines, f"{LOCK} holds no requirement"
    for req, hashes in lines:
        [spec] = req.specifier
        assert spec.operator == "==" and "*" not in spec.version, req
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), req
        assert not req.extras and req.url is None, req


@pytest.mark.parametrize(("python", "machine"), ENVIRONMENTS)
def test_the_pins_satisfy_the_ranges_pyproject_declares(python, machine):
    env = _environment(python, machine)
    pins = _pins(env)
    for dep in _declared():
        if dep.marker is not None and not dep.marker.evaluate(env):
            continue
        name = canonicalize_name(dep.name)
        assert name in pins, f"{dep} (declared in pyproject.toml) is not in the lock"
        assert dep.specifier.contains(pins[name], prereleases=True), \
            f"lock pins {name}=={pins[name]}, pyproject.toml wants {dep}"


def test_the_lock_is_regenerated_with_the_documented_command():
    assert "make agent-lock" in LOCK.read_text().split("\n", 3)[1]
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nagent-lock:", 1)[1].split("\n\n", 1)[0]
    for flag in ("--universal", "--generate-hashes", "--python-version 3.10",
                 "-o fleet_agent/requirements.lock"):
        assert flag in recipe
    assert "make agent-lock" in (ROOT / "README.md").read_text()


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run",
           "--ignore-installed", "--only-binary=:all:", *args]
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def requires_dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Requirement]]:
    """``{canonical name: Requires-Dist}`` of every pinned release, from its wheel's metadata
    on the package index (pip's report; markers stripped so that each pin is fetched)."""
    tmp = tmp_path_factory.mktemp("lock-metadata")
    every = tmp / "every-pin.txt"
    every.write_text("".join(f"{req.name}{req.specifier} "
                             + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n"
                             for req, hashes in _lock_lines()))
    _pip("--no-deps", "--require-hashes", "--report", "report.json", "-r", str(every), cwd=tmp)
    report = json.loads((tmp / "report.json").read_text())
    got = {canonicalize_name(item["metadata"]["name"]):
           [Requirement(r) for r in item["metadata"].get("requires_dist") or []]
           for item in report["install"]}
    assert set(got) == {canonicalize_name(req.name) for req, _ in _lock_lines()}
    return got


@pytest.mark.slow
@pytest.mark.parametrize(("python", "machine"), ENVIRONMENTS)
def test_the_lock_holds_the_whole_dependency_closure_and_nothing_else(
        python, machine, requires_dist):
    env = _environment(python, machine)
    pins = _pins(env)
    todo, reached = list(_declared()), set()
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate(env):
            continue  # also drops optional extras: "extra" is "" in env
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is needed on Python {python} {machine}, not in the lock"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"lock pins {name}=={pins[name]}, a dependency wants {req}"
        if name not in reached:
            reached.add(name)
            todo.extend(requires_dist[name])
    assert set(pins) == reached, f"pinned yet unused: {sorted(set(pins) - reached)}"


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["manylinux2014_x86_64", "manylinux2014_aarch64"])
def test_pip_installs_the_lock_in_hash_checking_mode(platform, tmp_path):
    """What install.sh runs, for this interpreter on each architecture: pip fetches only
    wheels whose sha256 the lock lists and finds every dependency pinned there."""
    _pip("--require-hashes", "--target", str(tmp_path / "t"), "--platform", platform,
         "--implementation", "cp", "-r", str(LOCK), cwd=tmp_path)


def test_environment_markers_are_kept_for_the_older_pythons():
    """tomli (pyproject: python_version < '3.11') and exceptiongroup (anyio's backport) are
    pinned for 3.10 and left out where the standard library has them."""
    assert {"tomli", "exceptiongroup"} <= set(_pins(_environment("3.10", "aarch64")))
    assert not {"tomli", "exceptiongroup"} & set(_pins(_environment("3.11", "x86_64")))
