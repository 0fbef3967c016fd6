"""The loaded knowledge base of this process, and its mirror in the database.

Rule files are read once per process and re-read only when a file under
``audit/rules/`` changes (a stat of a handful of files per call), so a worker
picks up an edited rule without a restart. :func:`sync_rules` mirrors the rules
into :class:`audit.models.Rule` rows and records a :class:`KnowledgeBaseVersion`;
a new version queues every host's latest report for re-evaluation.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from audit.kb.engine import RULES_DIR, KnowledgeBase, load_rules  # noqa: F401 (re-exported)
from audit.kb.paths import active_rules_dir

log = logging.getLogger(__name__)

_lock = threading.Lock()
_cache: dict[str, object] = {"signature": None, "kb": None}


def rules_dir() -> Path:
    """Where the rule files live: ``AUDIT_RULES_DIR`` when set, else the installed KB
    bundle's ``rules/``, else ``audit/rules`` (see :func:`audit.kb.paths.active_kb_dirs`)."""
    return active_rules_dir()


def _signature(directory: Path) -> tuple:
    """``(directory, (name, mtime_ns, size), ...)`` of its ``*.yaml`` files, by name: one
    ``stat`` per file (this runs on every evaluated report)."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".yaml"):
                    stat = entry.stat()  # follows a symlink, as Path.stat does
                    found.append((entry.name, stat.st_mtime_ns, stat.st_size))
    except FileNotFoundError:  # as an empty glob: load_rules says what is wrong
        pass
    return (str(directory), *sorted(found))


def current_knowledge_base() -> KnowledgeBase:
    """The validated knowledge base from :func:`rules_dir` (cached until a file changes).

    Raises :class:`audit.kb.engine.RuleError` when a rule file is invalid; the
    previous good version is NOT kept, so a broken edit is loud rather than silent.
    """
    directory = rules_dir()
    signature = _signature(directory)
    with _lock:
        if _cache["signature"] != signature:
            _cache["kb"] = load_rules([directory])
            _cache["signature"] = signature
        return _cache["kb"]  # type: ignore[return-value]


def sync_rules(kb: KnowledgeBase | None = None) -> tuple[str, bool]:
    """Mirror ``kb`` (default: the current files) into the database.

    Returns ``(version, is_new)``; ``is_new`` is True the first time this content
    hash is seen. Idempotent: a second call with the same files changes nothing.
    """
    from audit.models import KnowledgeBaseVersion, Rule

    kb = kb or current_knowledge_base()
    with transaction.atomic():
        row, created = KnowledgeBaseVersion.objects.get_or_create(
            version=kb.version,
            defaults={"rule_count": len(kb.rules), "verified_through": kb.verified_through or ""})
        if not created:
            return kb.version, False
        for rule in kb.rules:
            Rule.objects.update_or_create(rule_id=rule.id, defaults=_rule_fields(rule, kb))
        Rule.objects.exclude(rule_id__in=[r.id for r in kb.rules]).update(active=False)
    log.info("knowledge base %s loaded: %d rules", kb.version[:12], len(kb.rules))
    return kb.version, True


def unsaved_rules(kb: KnowledgeBase | None = None) -> list:
    """The current rule files as unsaved :class:`audit.models.Rule` rows (nothing written):
    what a page shows before the first ``load_rules``/evaluation mirrored them, so a GET
    never writes (a GET mirroring rules met the simulator's writes and answered
    "database is locked" on SQLite)."""
    from audit.models import Rule

    kb = kb or current_knowledge_base()
    return [Rule(rule_id=rule.id, **_rule_fields(rule, kb)) for rule in kb.rules]


def _rule_fields(rule, kb: KnowledgeBase) -> dict:
    return {
        "title": rule.title, "kind": rule.kind, "severity": rule.severity,
        "cadence": rule.cadence, "remediation": rule.remediation,
        "references": list(rule.references), "last_verified": rule.last_verified,
        "fixed_in": rule.fixed_in or "", "confirmed_upstream": rule.confirmed_upstream,
        "checklist": list(rule.checklist), "source_file": Path(rule.file).name,
        "definition": {"message": rule.message}, "kb_version": kb.version, "active": True,
    }


def requeue_fleet(version: str) -> int:
    """Queue every host's latest report for re-evaluation under KB ``version``.

    Returns how many reports were queued (on commit); a version already requeued queues none.
    """
    from audit.models import KnowledgeBaseVersion
    from fleet.models import Host, Report, future_cutoff
    from fleet.signals import report_needs_evaluation

    claimed = KnowledgeBaseVersion.objects.filter(
        version=version, fleet_requeued_at=None).update(fleet_requeued_at=timezone.now())
    if not claimed:
        return 0
    count = 0
    for host in Host.objects.all().only("pk"):
        latest = (Report.objects.filter(host=host, collected_at__lte=future_cutoff())
                  .order_by("-collected_at").first())
        if latest is None:
            continue
        Report.objects.filter(pk=latest.pk).update(evaluated_at=None)
        # The same path as a new report: audit's receiver queues evaluate_report (no import
        # of audit.tasks here, which would close an import cycle through kb_store).
        transaction.on_commit(lambda rid=str(latest.report_id): report_needs_evaluation.send(
            sender=Report, report_id=rid))
        count += 1
    return count
