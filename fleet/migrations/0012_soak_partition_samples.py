"""Metric and GPU samples become daily range partitions on ``ts`` (PostgreSQL only).

Django has no partitioned tables, so this is SQL run on PostgreSQL only; SQLite (the embedded
demo) keeps plain tables, and the model state does not change (``id`` stays the model's
primary key; the database key becomes ``(id, ts)``, see ``fleet/partitions.py``). Existing
rows are kept: the table is renamed, a partitioned table with the same columns, a DEFAULT
partition and day partitions (yesterday to 3 days ahead, and every day of existing rows within
``SAMPLE_RETENTION_DAYS``) is created, the rows are copied, the old table is dropped, and the
id sequence (continuing after the highest id), primary key, indexes and foreign keys are
recreated under their previous names. Rows older than the retention land in the DEFAULT
partition; the hourly ``fleet.tasks.maintain_sample_partitions`` deletes them.
The reverse turns the tables back into plain ones, rows included.
"""

from datetime import UTC, datetime, time, timedelta

from django.conf import settings
from django.db import migrations

#: Table -> partition key. A copy, not fleet.partitions.TABLES: a migration stays as it ran.
TABLES = {"fleet_metricsample": "ts", "fleet_gpusample": "ts"}
DAYS_AHEAD = 3


def _bound(day):
    return datetime.combine(day, time(), tzinfo=UTC)


def _indexes_and_foreign_keys(cursor, table):
    """``(CREATE INDEX statements, [(name, definition)] of foreign keys)`` of ``table``,
    its primary key left out. Identifiers come from TABLES only."""
    cursor.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                   "AND tablename = %s AND indexname <> %s", [table, f"{table}_pkey"])
    # A partitioned parent's index reads "ON ONLY t": recreated on the parent and partitions.
    indexes = [row[0].replace(" ON ONLY ", " ON ") for row in cursor.fetchall()]
    cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = to_regclass(%s) AND contype = 'f'", [table])
    return indexes, cursor.fetchall()


def _restore(cursor, table, primary_key, indexes, foreign_keys):
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({primary_key})")
    for statement in indexes:
        cursor.execute(statement)
    for name, definition in foreign_keys:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")


def _days(cursor, table, key):
    today = datetime.now(UTC).date()
    days = {today + timedelta(days=d) for d in range(-1, DAYS_AHEAD + 1)}
    since = datetime.now(UTC) - timedelta(days=settings.SAMPLE_RETENTION_DAYS)
    cursor.execute(f"SELECT DISTINCT (date_trunc('day', {key} AT TIME ZONE 'UTC'))::date "  # noqa: S608
                   f"FROM {table} WHERE {key} >= %s", [since])
    days.update(row[0] for row in cursor.fetchall())
    return sorted(days)


def partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for table, key in TABLES.items():
            old = f"{table}_unpartitioned"
            indexes, foreign_keys = _indexes_and_foreign_keys(cursor, table)
            days = _days(cursor, table, key)
            cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
            cursor.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING "
                           "CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION) "
                           f"PARTITION BY RANGE ({key})")
            cursor.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
            for day in days:
                cursor.execute(f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} "
                               "FOR VALUES FROM (%s) TO (%s)",
                               [_bound(day), _bound(day + timedelta(days=1))])
            cursor.execute(f"INSERT INTO {table} SELECT * FROM {old}")  # noqa: S608
            cursor.execute(f"DROP TABLE {old}")  # its identity sequence goes with it
            # One sequence for every partition: ids stay unique across partitions.
            cursor.execute(f"CREATE SEQUENCE {table}_id_seq OWNED BY {table}.id")
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id "
                           f"SET DEFAULT nextval('{table}_id_seq')")
            cursor.execute(f"SELECT setval('{table}_id_seq', COALESCE(max(id), 0) + 1, false) "  # noqa: S608
                           f"FROM {table}")
            _restore(cursor, table, f"id, {key}", indexes, foreign_keys)


def unpartition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for table in TABLES:
            old = f"{table}_partitioned"
            indexes, foreign_keys = _indexes_and_foreign_keys(cursor, table)
            cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
            cursor.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING CONSTRAINTS "
                           "INCLUDING STORAGE INCLUDING COMPRESSION)")
            cursor.execute(f"INSERT INTO {table} SELECT * FROM {old}")  # noqa: S608
            cursor.execute(f"DROP TABLE {old}")  # partitions and the sequence go with it
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN id "
                           "ADD GENERATED BY DEFAULT AS IDENTITY")
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "  # noqa: S608
                           f"COALESCE(max(id), 0) + 1, false) FROM {table}")
            _restore(cursor, table, "id", indexes, foreign_keys)


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0011_probes_probe_policy"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition),
    ]
