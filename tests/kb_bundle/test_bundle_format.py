"""The bundle file: built from the rules and data tables, signed, verified, tamper-evident."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.kb import bundle
from audit.kb.engine import load_rules
from audit.kb.paths import BUILTIN_DATA_DIR, BUILTIN_RULES_DIR


def _keys(key):
    return bundle.parse_public_keys([bundle.public_key_text(key.public_key())])


def _rewrite(blob: bytes, change) -> bytes:
    document = json.loads(gzip.decompress(blob))
    change(document)
    return gzip.compress(json.dumps(document).encode())


def test_a_built_bundle_verifies_and_carries_the_kb_facts(signing_key):
    blob = bundle.build(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR, signing_key)

    verified = bundle.read(blob, _keys(signing_key))
    kb = load_rules([BUILTIN_RULES_DIR])
    manifest = verified.manifest
    assert manifest["rule_count"] == len(kb.rules)
    assert manifest["verified_through"] == kb.verified_through
    assert manifest["rules_version"] == kb.version
    assert manifest["format_version"] == bundle.FORMAT_VERSION
    assert "rules/_kb.yaml" in verified.files and "data/gpus.yaml" in verified.files
    assert verified.files["data/gpus.yaml"] == (BUILTIN_DATA_DIR / "gpus.yaml").read_bytes()
    assert manifest["content_hash"] == bundle.content_hash(verified.files)


def test_a_changed_rule_file_breaks_the_file_hash(signing_key):
    blob = bundle.build(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR, signing_key)

    def flip(document):
        name = next(n for n in document["files"] if n.startswith("rules/")
                    and b"critical" in base64.b64decode(document["files"][n]))
        raw = base64.b64decode(document["files"][name]).replace(b"critical", b"info", 1)
        document["files"][name] = base64.b64encode(raw).decode()

    with pytest.raises(bundle.BundleError, match="sha256 does not match"):
        bundle.read(_rewrite(blob, flip), _keys(signing_key))


def test_a_changed_manifest_breaks_the_signature(signing_key):
    blob = bundle.build(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR, signing_key)

    def older_claim(document):
        document["manifest"]["verified_through"] = "0.99.0"

    with pytest.raises(bundle.BundleError, match="bad signature"):
        bundle.read(_rewrite(blob, older_claim), _keys(signing_key))


def test_a_bundle_signed_by_an_unknown_key_is_refused(signing_key):
    blob = bundle.build(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR, Ed25519PrivateKey.generate())

    with pytest.raises(bundle.BundleError, match="not one of AUDIT_KB_PUBLIC_KEYS"):
        bundle.read(blob, _keys(signing_key))


def test_a_path_escaping_the_bundle_is_refused(signing_key):
    files = {"rules/_kb.yaml": b"settings: {}\n", "data/../../etc/cron": b"x"}

    with pytest.raises(bundle.BundleError, match="path not allowed"):
        bundle.read(bundle.sign(files, signing_key, {}), _keys(signing_key))


def test_no_configured_key_refuses_every_bundle(signing_key):
    blob = bundle.build(BUILTIN_RULES_DIR, BUILTIN_DATA_DIR, signing_key)

    with pytest.raises(bundle.BundleError, match="no public key configured"):
        bundle.read(blob, {})


def test_a_malformed_public_key_setting_names_the_entry():
    with pytest.raises(bundle.BundleError, match=r"AUDIT_KB_PUBLIC_KEYS\[0\]"):
        bundle.parse_public_keys(["not-base64!"])


def test_keygen_and_build_commands_make_a_bundle_the_public_key_verifies(tmp_path):
    import io
    import stat

    from django.core.management import CommandError, call_command

    call_command("kb_bundle", "keygen", "--out", str(tmp_path), stdout=io.StringIO())
    pem = tmp_path / "kb-signing.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    with pytest.raises(CommandError, match="refusing to overwrite"):
        call_command("kb_bundle", "keygen", "--out", str(tmp_path), stdout=io.StringIO())
    out = tmp_path / "kb.kb.json.gz"
    call_command("kb_bundle", "build", "--key", str(pem), "--out", str(out),
                 stdout=io.StringIO())

    public = (tmp_path / "kb-signing.pub").read_text().strip()
    verified = bundle.read(out.read_bytes(), bundle.parse_public_keys([public]))
    assert verified.manifest["rule_count"] == len(load_rules([BUILTIN_RULES_DIR]).rules)
