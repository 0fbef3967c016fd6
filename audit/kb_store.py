"""Installing signed knowledge-base bundles, and which knowledge base is active.

:func:`install` is ``manage.py kb_update``: fetch (file or https URL, httpx with timeouts and
a size cap), verify (:func:`audit.kb.bundle.read`), refuse an older bundle, validate every
rule with ``load_rules`` (exactly what ``manage.py load_rules`` runs), unpack under
``AUDIT_KB_DIR/bundles/<hash>``, record it in the database, swap the ``current`` symlink
(``os.replace``: atomic on POSIX), then mirror the rules and re-queue the fleet
(:func:`audit.rulebook.sync_rules` / :func:`~audit.rulebook.requeue_fleet`, load_rules' path).
Any refusal raises :class:`BundleError` before the symlink or the database changed.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import ipaddress
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import yaml
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from packaging.version import InvalidVersion, Version

from audit.kb import bundle as kb_bundle
from audit.kb.bundle import BundleError
from audit.kb.engine import KnowledgeBase, RuleError, load_rules
from audit.kb.paths import CURRENT_LINK, active_kb_dirs, safe_load_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActiveKb:
    """The knowledge base in use, as the dashboard shows it."""

    version: str
    created_at: dt.datetime
    source: str
    content_hash: str
    verified_through: str
    rule_count: int
    builtin: bool


@dataclass(frozen=True)
class InstallResult:
    install_id: int
    version: str
    rules_version: str
    queued: int


def kb_dir() -> Path:
    return Path(settings.AUDIT_KB_DIR)


def public_keys() -> dict:
    """The configured verification keys (``AUDIT_KB_PUBLIC_KEYS``), by key id."""
    return kb_bundle.parse_public_keys(list(settings.AUDIT_KB_PUBLIC_KEYS))


# ----------------------------------------------------------------------------- active KB


def builtin_date(kb: KnowledgeBase) -> dt.datetime:
    """The built-in KB's date: the newest ``last_verified`` of its rules (midnight UTC)."""
    newest = max((r.last_verified for r in kb.rules), default=dt.date(1970, 1, 1))
    return dt.datetime.combine(newest, dt.time(), tzinfo=dt.UTC)


def active_kb() -> ActiveKb:
    """The installed bundle when one is recorded and its directory is the one in use,
    else the built-in knowledge of the repository (``audit/rules`` + ``audit/kb/data``)."""
    from audit.models import KnowledgeBaseInstall

    row = KnowledgeBaseInstall.objects.order_by("-installed_at", "-pk").first()
    bundle_dir = active_kb_dirs().bundle
    if row is not None and bundle_dir is not None and Path(row.path).resolve() == bundle_dir:
        return ActiveKb(row.version, row.created_at, row.source, row.content_hash,
                        row.verified_through, row.rule_count, builtin=False)
    from audit.rulebook import current_knowledge_base

    kb = current_knowledge_base()
    dirs = active_kb_dirs()
    files = kb_bundle.collect_files(dirs.rules, dirs.data)
    digest = kb_bundle.content_hash(files)
    return ActiveKb(f"built-in-{digest[:12]}", builtin_date(kb), "built-in (repository)",
                    digest, kb.verified_through or "", len(kb.rules), builtin=True)


# ----------------------------------------------------------------------------- fetch


def fetch(source: str) -> bytes:
    """The bytes of ``source``: a local file, or an https URL (http only for a loopback host
    when ``AUDIT_KB_ALLOW_HTTP_LOOPBACK``). Raises BundleError on any refusal or failure."""
    cap = settings.AUDIT_KB_MAX_BUNDLE_BYTES
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https"):
        path = Path(source)
        try:
            if path.stat().st_size > cap:
                raise BundleError(f"{source} is larger than AUDIT_KB_MAX_BUNDLE_BYTES={cap}")
            return path.read_bytes()
        except OSError as exc:
            raise BundleError(f"cannot read {source}: {exc}") from exc
    if parts.scheme == "http" and not (settings.AUDIT_KB_ALLOW_HTTP_LOOPBACK
                                       and _is_loopback(parts.hostname or "")):
        raise BundleError("bundle URLs must be https:// (http only for a loopback host with "
                          "AUDIT_KB_ALLOW_HTTP_LOOPBACK=true)")
    return _download(source, cap)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _download(url: str, cap: int) -> bytes:
    timeout = httpx.Timeout(settings.AUDIT_KB_DOWNLOAD_TIMEOUT_S)
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client, \
                client.stream("GET", url) as response:
            if response.status_code != 200:
                raise BundleError(f"GET {url} answered HTTP {response.status_code}")
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > cap:
                    raise BundleError(f"{url} is larger than AUDIT_KB_MAX_BUNDLE_BYTES={cap}")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as exc:
        raise BundleError(f"cannot download {url}: {exc}") from exc


# ----------------------------------------------------------------------------- install


def install(source: str) -> InstallResult:
    """Verify and activate the bundle at ``source``; re-queue the fleet. See module doc.

    Raises BundleError (bad signature, bad rule, older or same bundle, bad download) with
    nothing changed: no symlink swap, no database row, no unpacked directory left behind.
    """
    bundle = kb_bundle.read(fetch(source), public_keys())
    kb_dir().mkdir(parents=True, exist_ok=True)
    with open(kb_dir() / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two kb_update runs: the second sees the first
        return _install_locked(bundle, source)


def _install_locked(bundle: kb_bundle.Bundle, source: str) -> InstallResult:
    _refuse_older(bundle)
    staging = kb_dir() / f".staging-{uuid.uuid4().hex}"
    try:
        bundle.unpack(staging)
        kb = _validate(staging)
        final = kb_dir() / "bundles" / bundle.content_hash
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # a re-install of a bundle that was active before
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    row = _activate(bundle, kb, final, source)
    from audit.rulebook import requeue_fleet, sync_rules

    version, is_new = sync_rules(kb)
    queued = requeue_fleet(version) if is_new else 0
    log.info("knowledge base bundle %s installed from %s: %d rules, %d reports queued",
             bundle.version, source, len(kb.rules), queued)
    return InstallResult(row.pk, bundle.version, kb.version, queued)


def _refuse_older(bundle: kb_bundle.Bundle) -> None:
    active = active_kb()
    if bundle.content_hash == active.content_hash:
        raise BundleError(f"bundle {bundle.version} is already the active knowledge base")
    if bundle.created_at <= active.created_at:
        raise BundleError(f"bundle {bundle.version} (built {bundle.created_at:%Y-%m-%d %H:%M}) "
                          f"is not newer than the active knowledge base {active.version} "
                          f"({active.created_at:%Y-%m-%d %H:%M})")
    if _version_lt(bundle.manifest.get("verified_through"), active.verified_through):
        raise BundleError(f"bundle is verified through vLLM "
                          f"{bundle.manifest.get('verified_through')}, older than the active "
                          f"knowledge base's {active.verified_through}")


def _version_lt(a: object, b: object) -> bool:
    try:
        return Version(str(a)) < Version(str(b))
    except InvalidVersion:
        return False


def _validate(directory: Path) -> KnowledgeBase:
    """Every rule through load_rules (RuleError -> BundleError) and every data table parsed."""
    try:
        kb = load_rules([directory / "rules"])
    except RuleError as exc:
        raise BundleError(f"bad rule: {exc}".replace(str(directory) + "/", "")) from exc
    except RecursionError:  # a rule file nested past the YAML parser's recursion
        raise BundleError("bad rule: a rule file is nested too deeply") from None
    for path in sorted((directory / "data").rglob("*")):
        try:
            if path.suffix in (".yaml", ".yml"):
                safe_load_yaml(path.read_text(encoding="utf-8"))
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, yaml.YAMLError) as exc:
            raise BundleError(f"bad data table {path.relative_to(directory)}: {exc}") from exc
        except RecursionError:
            raise BundleError(f"bad data table {path.relative_to(directory)}: nested too "
                              f"deeply") from None
    return kb


def _activate(bundle: kb_bundle.Bundle, kb: KnowledgeBase, final: Path, source: str):
    """Record the install and swap ``current`` to ``final`` in one transaction (the swap
    is its last step, so a failed swap rolls the row back)."""
    from audit.models import KnowledgeBaseInstall

    manifest = bundle.manifest
    with transaction.atomic():
        row = KnowledgeBaseInstall.objects.create(
            content_hash=bundle.content_hash, version=bundle.version, rules_version=kb.version,
            created_at=bundle.created_at, verified_through=manifest.get("verified_through", ""),
            rule_count=len(kb.rules), format_version=manifest.get("format_version", 1),
            key_id=bundle.key_id, source=source[:2000], path=str(final),
            installed_at=timezone.now())
        link = kb_dir() / CURRENT_LINK
        tmp = kb_dir() / f".{CURRENT_LINK}-{uuid.uuid4().hex}"
        os.symlink(final, tmp)
        os.replace(tmp, link)
    return row
