"""Compress kept raw reports with lz4 (PostgreSQL >= 14 built with lz4).

Only new values are compressed this way; existing rows keep pglz until rewritten. SQLite
(the embedded demo) and a PostgreSQL without lz4 are left as they are.
"""

from django.db import DatabaseError, migrations, transaction


def _lz4(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("ALTER TABLE fleet_report ALTER COLUMN raw SET COMPRESSION lz4")
    except DatabaseError:  # built without lz4 (--without-lz4): pglz stays
        pass


def _pglz(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql" and connection.pg_version >= 140000:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE fleet_report ALTER COLUMN raw SET COMPRESSION pglz")


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0009_scale_report_derived_at"),
    ]

    operations = [
        migrations.RunPython(_lz4, _pglz),
    ]
