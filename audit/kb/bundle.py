"""Signed knowledge-base bundles: build, verify and unpack (no Django here).

A bundle is ONE gzip-compressed JSON file (``*.kb.json.gz``)::

    {"format": "fleet-audit.kb-bundle/1",
     "manifest": {"format_version": 1, "content_hash": <sha256 hex>, "created_at": <ISO UTC>,
                  "verified_through": "0.30.0", "rule_count": 78, "rules_version": <hex>,
                  "version": "20261201.064500-<hash[:12]>",
                  "files": {"rules/_kb.yaml": {"sha256": ..., "size": ...}, "data/...": ...}},
     "signature": {"alg": "ed25519", "key_id": <sha256(raw public key)[:16]>, "value": <b64>},
     "files": {"rules/_kb.yaml": <base64 bytes>, ...}}

The signature (Ed25519, ``cryptography``) covers the canonical JSON of ``manifest`` (sorted
keys, no spaces, ASCII); the manifest carries each file's sha256, so one signature covers
every byte. ``content_hash`` is sha256 over the files sorted by path, each fed as
``path NUL size NUL bytes`` (the same shape as :attr:`KnowledgeBase.version`).

Why JSON and not a tar: a tar member can be a link, a device or ``../`` path; a JSON map of
path -> bytes has none of those, and every path is checked against :data:`PATH_RE` anyway.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import gzip
import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.kb.engine import SETTINGS_FILE, load_rules

FORMAT = "fleet-audit.kb-bundle/1"
FORMAT_VERSION = 1
#: Bundle paths: ``rules/<file>.yaml`` (flat, as load_rules reads a folder) or ``data/<path>``.
PATH_RE = re.compile(r"^(rules/[\w.-]+\.ya?ml|data/(?:[\w.+-]+/)*[\w.+-]+)$")
#: Decompressed size refused above this many bytes (a gzip bomb stops here, not in memory).
MAX_UNPACKED_BYTES = 256 * 2**20


class BundleError(ValueError):
    """A bundle that is refused; ``str()`` says why in one sentence."""


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its manifest and file contents (path -> bytes)."""

    manifest: dict[str, Any]
    files: dict[str, bytes]
    key_id: str

    @property
    def created_at(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.manifest["created_at"])

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def version(self) -> str:
        return self.manifest["version"]

    def unpack(self, target: Path) -> None:
        """Write the files under ``target`` (which must not exist yet)."""
        target.mkdir(parents=True)
        for path, blob in self.files.items():
            out = target / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(blob)


# ----------------------------------------------------------------------------- keys


def generate_key() -> tuple[bytes, str]:
    """A new key pair: (private key as unencrypted PKCS#8 PEM, public key as base64 raw)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return pem, public_key_text(private.public_key())


def public_key_text(key: Ed25519PublicKey) -> str:
    """The 32 raw bytes of ``key`` in base64 (the form AUDIT_KB_PUBLIC_KEYS takes)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file; raises BundleError when it is not one."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise BundleError(f"cannot read the private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path} is not an Ed25519 private key")
    return key


def parse_public_keys(texts: list[str]) -> dict[str, Ed25519PublicKey]:
    """``{key_id: key}`` from base64 raw keys; raises BundleError naming a bad entry."""
    keys = {}
    for index, text in enumerate(texts):
        try:
            raw = base64.b64decode(text.strip(), validate=True)
            key = Ed25519PublicKey.from_public_bytes(raw)
        except (binascii.Error, ValueError) as exc:
            raise BundleError(f"AUDIT_KB_PUBLIC_KEYS[{index}] is not a base64 Ed25519 "
                              f"public key: {exc}") from exc
        keys[key_id(raw)] = key
    return keys


def key_id(raw_public: bytes) -> str:
    """First 16 hex digits of sha256 of the raw public key (names the key in a bundle)."""
    return hashlib.sha256(raw_public).hexdigest()[:16]


# ----------------------------------------------------------------------------- build


def collect_files(rules_dir: Path, data_dir: Path) -> dict[str, bytes]:
    """The files a bundle ships: top-level ``*.yaml``/``*.yml`` of ``rules_dir`` (what
    load_rules reads) and every regular file under ``data_dir`` (hidden files and
    ``__pycache__`` skipped). Raises BundleError for a name outside :data:`PATH_RE`."""
    files: dict[str, bytes] = {}
    for path in sorted(rules_dir.iterdir()):
        if path.suffix in {".yaml", ".yml"} and path.is_file():
            files[f"rules/{path.name}"] = path.read_bytes()
    for path in sorted(data_dir.rglob("*")):
        rel = path.relative_to(data_dir)
        if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            continue
        files[f"data/{rel.as_posix()}"] = path.read_bytes()
    for name in files:
        if not PATH_RE.match(name):
            raise BundleError(f"{name}: file name not allowed in a bundle (letters, digits, "
                              f"'.', '_', '-', '+' only)")
    return files


def content_hash(files: dict[str, bytes]) -> str:
    """sha256 over ``path NUL size NUL bytes`` of every file, sorted by path."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{len(files[name])}\0".encode())
        digest.update(files[name])
    return digest.hexdigest()


def build(rules_dir: Path, data_dir: Path, private_key: Ed25519PrivateKey,
          now: dt.datetime | None = None) -> bytes:
    """The signed, compressed bundle of ``rules_dir`` + ``data_dir``.

    The rules are validated first (``load_rules``; RuleError propagates) so a developer
    cannot sign a bundle that every installation would refuse.
    """
    if not (rules_dir / SETTINGS_FILE).is_file():
        raise BundleError(f"{rules_dir} has no {SETTINGS_FILE} (verified_through lives there)")
    kb = load_rules([rules_dir])
    return sign(collect_files(rules_dir, data_dir), private_key,
                {"verified_through": kb.verified_through or "", "rule_count": len(kb.rules),
                 "rules_version": kb.version}, now)


def sign(files: dict[str, bytes], private_key: Ed25519PrivateKey, facts: dict[str, Any],
         now: dt.datetime | None = None) -> bytes:
    """The signed, compressed bundle of ``files`` (bundle path -> bytes), unvalidated.

    ``facts``: verified_through, rule_count, rules_version (what :func:`build` read from
    the rules). Tests use it to sign a bundle :func:`build` would refuse.
    """
    created = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    digest = content_hash(files)
    manifest = {
        "format_version": FORMAT_VERSION, "content_hash": digest,
        "created_at": created.isoformat(), **facts,
        "version": f"{created:%Y%m%d.%H%M%S}-{digest[:12]}",
        "files": {name: {"sha256": hashlib.sha256(blob).hexdigest(), "size": len(blob)}
                  for name, blob in sorted(files.items())},
    }
    raw_public = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                       serialization.PublicFormat.Raw)
    document = {
        "format": FORMAT, "manifest": manifest,
        "signature": {"alg": "ed25519", "key_id": key_id(raw_public),
                      "value": base64.b64encode(private_key.sign(_canonical(manifest))).decode()},
        "files": {name: base64.b64encode(blob).decode() for name, blob in sorted(files.items())},
    }
    return gzip.compress(json.dumps(document, sort_keys=True).encode(), mtime=0)


def _canonical(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode()


# ----------------------------------------------------------------------------- verify


def read(blob: bytes, public_keys: dict[str, Ed25519PublicKey]) -> Bundle:
    """Decompress, verify the signature and every file's hash; return the :class:`Bundle`.

    Raises BundleError: not a bundle, unknown format, no configured key signed it, bad
    signature, a file missing, extra, renamed, of the wrong hash, or with a bad path.
    """
    document = _decode(blob)
    manifest, signature = document.get("manifest"), document.get("signature")
    if document.get("format") != FORMAT or not isinstance(manifest, dict) \
            or not isinstance(signature, dict):
        raise BundleError(f"not a {FORMAT} bundle")
    _check_signature(manifest, signature, public_keys)
    files = _check_files(manifest, document.get("files"))
    if content_hash(files) != manifest.get("content_hash"):
        raise BundleError("content hash does not match the files")
    try:
        dt.datetime.fromisoformat(str(manifest.get("created_at")))
    except ValueError as exc:
        raise BundleError(f"manifest created_at is not an ISO date: {exc}") from exc
    return Bundle(manifest, files, str(signature.get("key_id")))


def _decode(blob: bytes) -> dict[str, Any]:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(blob)) as stream:
            raw = stream.read(MAX_UNPACKED_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise BundleError(f"not a gzip-compressed bundle: {exc}") from exc
    if len(raw) > MAX_UNPACKED_BYTES:
        raise BundleError(f"bundle unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    try:
        document = json.loads(raw)
    except RecursionError:  # e.g. 100,000 nested arrays: the parser's depth limit
        raise BundleError("bundle is not JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"bundle is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise BundleError(f"not a {FORMAT} bundle")
    return document


def _check_signature(manifest: dict[str, Any], signature: dict[str, Any],
                     public_keys: dict[str, Ed25519PublicKey]) -> None:
    if not public_keys:
        raise BundleError("no public key configured (AUDIT_KB_PUBLIC_KEYS is empty)")
    if signature.get("alg") != "ed25519":
        raise BundleError(f"signature algorithm {signature.get('alg')!r} is not ed25519")
    key = public_keys.get(str(signature.get("key_id")))
    if key is None:
        raise BundleError(f"signed by key {signature.get('key_id')!r}, which is not one of "
                          f"AUDIT_KB_PUBLIC_KEYS {sorted(public_keys)}")
    try:
        key.verify(base64.b64decode(str(signature.get("value")), validate=True),
                   _canonical(manifest))
    except (InvalidSignature, binascii.Error, ValueError) as exc:
        raise BundleError("bad signature: the manifest was not signed by key "
                          f"{signature.get('key_id')} or was changed after signing") from exc


def _check_files(manifest: dict[str, Any], encoded: Any) -> dict[str, bytes]:
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not isinstance(encoded, dict):
        raise BundleError("bundle has no file list")
    if set(listed) != set(encoded):
        raise BundleError(f"files differ from the signed manifest: "
                          f"{sorted(set(listed) ^ set(encoded))[:5]}")
    files = {}
    for name, entry in listed.items():
        if not PATH_RE.match(name) or {".", ".."} & set(name.split("/")):
            raise BundleError(f"{name!r}: path not allowed in a bundle")
        try:
            blob = base64.b64decode(str(encoded[name]), validate=True)
        except binascii.Error as exc:
            raise BundleError(f"{name}: not base64: {exc}") from exc
        if not isinstance(entry, dict) or hashlib.sha256(blob).hexdigest() != entry.get("sha256"):
            raise BundleError(f"{name}: sha256 does not match the signed manifest")
        files[name] = blob
    if f"rules/{SETTINGS_FILE}" not in files:
        raise BundleError(f"bundle has no rules/{SETTINGS_FILE}")
    return files
