"""Deleting raw reports in bulk: one statement per batch on PostgreSQL.

A 10,000-host fleet stores 333 raw reports a second and, once they are derived and
evaluated, deletes as many (``fleet.tasks``). Django's delete collector loads every doomed
row, its ``raw`` JSON included, into Python, and then nulls each referencing column batch
by batch: about 0.4 ms of application CPU per report, a tenth of what the whole steady
tier spends on the report itself (``bench/prune.py``). Here one data-modifying statement
picks a batch, nulls the columns that refer to it and deletes it, and no row reaches
Python. Other databases (the SQLite demo) keep the collector.

The referencing columns are read off the models (every relation to :class:`Report`), so a
new foreign key is covered without editing this module; one that is not ``SET_NULL`` makes
the collector decide instead, since only it knows what a cascade or a protection means.
"""

from __future__ import annotations

import functools
from datetime import datetime

from django.apps import apps
from django.db import connection, models, transaction

from fleet.models import Report, Server


def _set_null_columns() -> list[tuple[str, str]] | None:
    """``[(table, column), ...]`` of every foreign key to :class:`Report`, all of them
    ``SET_NULL``; None when one is not (the collector must handle it)."""
    columns = []
    for relation in Report._meta.get_fields(include_hidden=True):  # related_name="+" too
        if not (relation.auto_created and not relation.concrete):
            continue  # a field of the report itself
        if relation.on_delete is not models.SET_NULL:
            return None
        columns.append((relation.related_model._meta.db_table, relation.field.column))
    return sorted(set(columns))


def _held_by() -> list[models.ForeignKey]:
    """The foreign keys whose reports are kept whatever their age: each server's newest
    report and, with the audit app, the start of each server's metric window."""
    held = [Server._meta.get_field("last_report")]
    if apps.is_installed("audit"):  # the audit app is above fleet: look it up, not import it
        state = apps.get_model("audit", "ServerAuditState")
        held.append(state._meta.get_field("metrics_baseline"))
    return held


def delete_reports(cutoff: datetime, derived_only: bool, batch: int) -> int:
    """Delete up to ``batch`` unkept reports received before ``cutoff``; the columns that
    referred to them become NULL. Returns how many went.

    ``derived_only``: only reports already derived and evaluated (their numbers live on in
    the samples), and never a server's newest report or the start of its metric window;
    otherwise (the retention limit) every unkept report past ``cutoff``.

    On PostgreSQL one statement; rows another transaction holds are skipped (``SKIP
    LOCKED``), to be taken by a later run, so a prune never waits on the ingest.
    """
    columns = _set_null_columns()
    if connection.vendor != "postgresql" or columns is None:
        return _delete_with_collector(cutoff, derived_only, batch)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_statement(derived_only, tuple(columns)),
                       {"cutoff": cutoff, "batch": batch})
        return cursor.rowcount


@functools.cache
def _statement(derived_only: bool, columns: tuple[tuple[str, str], ...]) -> str:
    """The PostgreSQL statement of :func:`delete_reports` (parameters ``cutoff``,
    ``batch``)."""
    # Every identifier below comes from the models' metadata, quoted; values are parameters.
    q = connection.ops.quote_name
    conditions = ["r.received_at < %(cutoff)s", "NOT r.keep"]
    if derived_only:
        conditions += ["r.derived_at IS NOT NULL", "r.evaluated_at IS NOT NULL"]
        conditions += [f"NOT EXISTS (SELECT 1 FROM {q(key.model._meta.db_table)} h "  # noqa: S608
                       f"WHERE h.{q(key.column)} = r.id)" for key in _held_by()]
    nulls = "".join(f", n{i} AS (UPDATE {q(table)} t SET {q(column)} = NULL "  # noqa: S608
                    f"FROM doomed d WHERE t.{q(column)} = d.id)"
                    for i, (table, column) in enumerate(columns))
    report = q(Report._meta.db_table)
    where = " AND ".join(conditions)
    return (f"WITH doomed AS (SELECT r.id FROM {report} r WHERE {where} "  # noqa: S608
            f"LIMIT %(batch)s FOR UPDATE OF r SKIP LOCKED){nulls} "
            f"DELETE FROM {report} r USING doomed d WHERE r.id = d.id")


def _delete_with_collector(cutoff: datetime, derived_only: bool, batch: int) -> int:
    """:func:`delete_reports` through Django's collector (any database, any relation)."""
    doomed = Report.objects.filter(received_at__lt=cutoff, keep=False)
    if derived_only:
        doomed = doomed.filter(derived_at__isnull=False, evaluated_at__isnull=False)
        for key in _held_by():
            doomed = doomed.exclude(pk__in=key.model.objects.exclude(**{key.name: None})
                                    .values(key.attname))
    ids = list(doomed.values_list("pk", flat=True)[:batch])
    deleted, _ = Report.objects.filter(pk__in=ids).delete()
    return deleted
