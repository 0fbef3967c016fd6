"""``manage.py kb_bundle keygen|build``: developer side of signed knowledge-base bundles.

``keygen --out DIR`` writes ``kb-signing.pem`` (Ed25519 private key, mode 0600; keep it out of
the repository) and ``kb-signing.pub`` (base64 raw public key for ``AUDIT_KB_PUBLIC_KEYS``).
``build --key PEM --out FILE`` validates the rules (as load_rules does) and writes the signed
bundle of ``audit/rules`` + ``audit/kb/data`` (or ``--rules`` / ``--data``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.kb import bundle
from audit.kb.engine import RuleError
from audit.kb.paths import BUILTIN_DATA_DIR, BUILTIN_RULES_DIR


class Command(BaseCommand):
    """Make a signing key pair, or build a signed knowledge-base bundle."""

    help = "Knowledge-base bundles: 'keygen --out DIR' or 'build --key PEM --out FILE'."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        keygen = sub.add_parser("keygen", help="write an Ed25519 key pair")
        keygen.add_argument("--out", default=".", help="folder for kb-signing.pem/.pub")
        build = sub.add_parser("build", help="build and sign a bundle")
        build.add_argument("--key", required=True, help="Ed25519 private key (PEM) path")
        build.add_argument("--out", required=True, help="bundle file to write (.kb.json.gz)")
        build.add_argument("--rules", default=str(BUILTIN_RULES_DIR), help="rules folder")
        build.add_argument("--data", default=str(BUILTIN_DATA_DIR), help="KB data folder")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "keygen":
            self._keygen(Path(options["out"]))
        else:
            self._build(options)

    def _keygen(self, folder: Path) -> None:
        private, public = bundle.generate_key()
        key_path, pub_path = folder / "kb-signing.pem", folder / "kb-signing.pub"
        if key_path.exists():
            raise CommandError(f"{key_path} exists; refusing to overwrite a signing key")
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(private)
        pub_path.write_text(public + "\n", encoding="ascii")
        self.stdout.write(f"private key: {key_path} (keep it out of the repository)\n"
                          f"public key:  {public}\n"
                          f"add it to AUDIT_KB_PUBLIC_KEYS on every installation")

    def _build(self, options: dict[str, Any]) -> None:
        try:
            key = bundle.load_private_key(Path(options["key"]))
            blob = bundle.build(Path(options["rules"]), Path(options["data"]), key)
        except (bundle.BundleError, RuleError) as exc:
            self.stderr.write(f"kb_bundle: {exc}")
            sys.exit(1)
        Path(options["out"]).write_bytes(blob)
        manifest = bundle.read(blob, {bundle.key_id(_raw(key)): key.public_key()}).manifest
        self.stdout.write(f"bundle {manifest['version']}: {manifest['rule_count']} rules, "
                          f"{len(manifest['files'])} files, verified through vLLM "
                          f"{manifest['verified_through']} -> {options['out']}")


def _raw(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)
