"""Fixtures of the knowledge-base bundle tests: a signing key trusted by the settings, a
private AUDIT_KB_DIR per test, and helpers that sign edited copies of the built-in KB."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest

from audit.kb import bundle
from audit.kb.paths import BUILTIN_DATA_DIR, BUILTIN_RULES_DIR


@pytest.fixture
def signing_key():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate()


@pytest.fixture
def kb_settings(settings, tmp_path: Path, signing_key):
    """AUDIT_KB_DIR under tmp_path and the test key as the only trusted public key."""
    settings.AUDIT_KB_DIR = str(tmp_path / "kb")
    settings.AUDIT_KB_PUBLIC_KEYS = [bundle.public_key_text(signing_key.public_key())]
    settings.AUDIT_RULES_DIR = None
    return settings


@pytest.fixture
def make_bundle(tmp_path: Path, signing_key) -> Callable[..., Path]:
    """``make_bundle(edit=None, days=1, validate=True)`` -> path of a signed bundle of the
    built-in KB, built ``days`` after now; ``edit(files)`` changes the path->bytes map
    first (``validate=False`` signs it without running load_rules, as an attacker or a
    buggy pipeline might)."""
    counter = iter(range(1000))

    def make(edit: Callable[[dict[str, bytes]], None] | None = None, days: float = 1,
             validate: bool = True) -> Path:
        now = dt.datetime.now(dt.UTC) + dt.timedelta(days=days)
        files = bundle.collect_files(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR)
        if edit:
            edit(files)
        if validate:
            src = tmp_path / f"src-{next(counter)}"
            for name, blob in files.items():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                (src / name).write_bytes(blob)
            blob = bundle.build(src / "rules", src / "data", signing_key, now=now)
        else:
            blob = bundle.sign(files, signing_key, {"verified_through": "0.30.0",
                                                   "rule_count": 1, "rules_version": "x"}, now)
        out = tmp_path / f"bundle-{next(counter)}.kb.json.gz"
        out.write_bytes(blob)
        return out
    return make
