"""Daily range partitions of the time-series tables on PostgreSQL.

``fleet_metricsample`` and ``fleet_gpusample`` are ``PARTITION BY RANGE (ts)`` on PostgreSQL
(migration ``0012_soak_partition_samples``): one partition per UTC day, named
``<table>_pYYYYMMDD``, plus ``<table>_default`` (``DEFAULT`` partition) that takes any row no
day partition covers, so an ingest never fails for a missing partition. Retention then drops
whole day partitions instead of deleting rows. SQLite (the embedded demo) keeps plain tables;
there, and on a PostgreSQL table that is not partitioned, retention deletes rows.

Primary key: PostgreSQL requires a partitioned table's primary key to include the partition
key, so the database key is ``(id, ts)``. Django keeps ``id`` as the model's primary key: it
comes from one sequence shared by every partition, so it is unique by construction, not by a
constraint across partitions. A ``CompositePrimaryKey`` (Django 5.2) was not used: no foreign
key may point at such a model, the admin does not support it, ``pk`` becomes a tuple in every
query that reads it, and SQLite would need a table rebuild for nothing.

Raw reports (``fleet_report``) are not partitioned: other tables reference them by foreign key
(samples, servers' newest report, the audit state's metric baseline, findings), ``report_id``
must stay unique over all time (duplicate delivery of a spooled report) and a unique
constraint on a partitioned table must include the partition key, and their retention is not
by time alone (kept reports, each server's newest, survive any age).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction

#: Partitioned table -> its partition key (a ``timestamptz`` column).
TABLES = {"fleet_metricsample": "ts", "fleet_gpusample": "ts"}
#: Day partitions created ahead of today, so midnight never waits for the hourly task
#: (3 days: a beat down over a weekend still finds partitions; the DEFAULT one backs that).
DAYS_AHEAD = 3
#: Past days the maintenance creates at most in one run for rows found in the DEFAULT
#: partition (e.g. a spool replayed after a long outage); the next runs do the rest.
MAX_NEW_PER_RUN = 60
#: How long partition DDL waits for a lock before giving up until the next run: a DROP locks
#: the parent table, and inserts queue behind a DDL that waits behind a long dashboard query.
LOCK_TIMEOUT = "5s"
_DAY_SUFFIX = re.compile(r"_p(\d{8})$")


def partition_name(table: str, day: date) -> str:
    """``fleet_metricsample_p20261201`` for ``day`` (UTC)."""
    return f"{table}_p{day:%Y%m%d}"


def _bound(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def is_partitioned(table: str) -> bool:
    """True on PostgreSQL when ``table`` is a partitioned table (relkind ``p``)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    return bool(row) and row[0] == "p"


def day_partitions(table: str) -> dict[date, str]:
    """``{day: partition name}`` of the day partitions attached to ``table`` now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                       "WHERE i.inhparent = to_regclass(%s)", [table])
        names = [row[0] for row in cursor.fetchall()]
    out = {}
    for name in names:
        match = _DAY_SUFFIX.search(name)
        if match:
            out[datetime.strptime(match.group(1), "%Y%m%d").date()] = name
    return out


def create_day_partition(table: str, day: date) -> str:
    """Create and attach ``table``'s partition for ``day``; returns its name.

    Rows of that day already in the DEFAULT partition move into the new one first (attaching
    a range the DEFAULT partition still holds rows of is refused). The DEFAULT partition is
    locked for the move (ATTACH would lock it anyway), so an insert routed there waits for
    this transaction (milliseconds: the DEFAULT partition holds only stragglers).
    Raises ``OperationalError`` when a lock is not granted within :data:`LOCK_TIMEOUT`.
    """
    key, name, default = TABLES[table], partition_name(table, day), f"{table}_default"
    low, high = _bound(day), _bound(day + timedelta(days=1))
    # Identifiers are built from TABLES and a date only, never from input.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(f"LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS "
                       "INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)")
        cursor.execute(f"WITH moved AS (DELETE FROM {default} WHERE {key} >= %s AND "  # noqa: S608
                       f"{key} < %s RETURNING *) INSERT INTO {name} SELECT * FROM moved",
                       [low, high])
        cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} "
                       "FOR VALUES FROM (%s) TO (%s)", [low, high])
    return name


def ensure_partitions(table: str, days: Iterable[date]) -> list[str]:
    """Create the missing day partitions of ``days``; returns the names created."""
    have = day_partitions(table)
    return [create_day_partition(table, day) for day in sorted(set(days)) if day not in have]


def _straggler_days(table: str, since: datetime) -> list[date]:
    """UTC days of rows at or after ``since`` sitting in the DEFAULT partition."""
    key = TABLES[table]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT (date_trunc('day', {key} AT TIME ZONE 'UTC'))::date "  # noqa: S608
                       f"FROM {table}_default WHERE {key} >= %s ORDER BY 1 LIMIT %s",
                       [since, MAX_NEW_PER_RUN])
        return [row[0] for row in cursor.fetchall()]


def maintain(now: datetime, retention_days: int) -> dict[str, dict[str, int]]:
    """Partitions for today - 1 .. today + :data:`DAYS_AHEAD` and for the DEFAULT
    partition's stragglers within retention; drop day partitions wholly older than
    ``now - retention_days``, and delete older rows from the DEFAULT partition.

    A day partition goes once its last instant is past the cutoff, so a row lives between
    ``retention_days`` and ``retention_days + 1`` days. Tables that are not partitioned
    (SQLite, or before the migration) get a row ``DELETE`` of the same cutoff.
    Returns ``{table: {"created": n, "dropped": n, "deleted": n}}``.
    """
    cutoff = now - timedelta(days=retention_days)
    today = now.astimezone(UTC).date()
    result = {}
    for table, key in TABLES.items():
        if not is_partitioned(table):
            with connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {table} WHERE {key} < %s", [cutoff])  # noqa: S608
                result[table] = {"created": 0, "dropped": 0, "deleted": cursor.rowcount}
            continue
        wanted = [today + timedelta(days=d) for d in range(-1, DAYS_AHEAD + 1)]
        created = ensure_partitions(table, wanted + _straggler_days(table, cutoff))
        dropped = 0
        for day, name in sorted(day_partitions(table).items()):
            if _bound(day + timedelta(days=1)) <= cutoff:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    cursor.execute(f"DROP TABLE {name}")
                dropped += 1
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table}_default WHERE {key} < %s",  # noqa: S608
                           [cutoff])
            deleted = cursor.rowcount
        result[table] = {"created": len(created), "dropped": dropped, "deleted": deleted}
    return result
