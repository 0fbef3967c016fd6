"""Model rows read and written by hand-written SQL where the ORM's compilation of the
statement costs the worker more CPU than running it (the evaluation of a report runs a dozen
small statements; compiling each, with ``select_related``, ``defer`` or ``save(update_fields)``,
was a third of a metric-cadence evaluation).

Rows are built as the ORM builds them (``Model.from_db``, each field's ``from_db_value``)
and values written are prepared by each field as the ORM prepares them, so what is read and
stored is the same. Hand-written rather than a library's: what is saved here is the ORM's own
per-statement work, which any query builder would redo in its own form.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import DatabaseError, connection


def json_value(value: Any) -> Any:
    """A jsonb column as read: Django's PostgreSQL loader gives its text (decoded here as
    ``JSONField.from_db_value`` decodes it); another loader, the value itself."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def instance(model: Any, values: dict[str, Any]) -> Any:
    """``model`` as the ORM builds a row it read with only these fields (``{attname:
    value}``, values as the field converts them); any other field is loaded when read."""
    names = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(model.objects.db, names, [values[name] for name in names])


_COLUMNS: dict[tuple[type, str], str] = {}


def columns(model: Any, alias: str) -> str:
    """Every concrete column of ``model`` qualified by ``alias``, in field order: the
    select list :func:`load` reads."""
    key = (model, alias)
    found = _COLUMNS.get(key)
    if found is None:
        found = _COLUMNS[key] = ", ".join(f'{alias}."{f.column}"'
                                          for f in model._meta.concrete_fields)
    return found


def load(model: Any, sql: str, params: Any) -> list[Any]:
    """Run ``sql`` (selecting :func:`columns` of ``model``) and build one ``model`` per
    row, each field's value converted as the ORM converts it (``from_db_value``; on another
    database than PostgreSQL, whose backend converts more, ``model.objects.raw``)."""
    if connection.vendor != "postgresql":
        return list(model.objects.raw(sql, params))
    fields = model._meta.concrete_fields
    names = [f.attname for f in fields]
    converters = [(i, f.from_db_value) for i, f in enumerate(fields)
                  if hasattr(f, "from_db_value")]
    db = model.objects.db
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = []
    for row in rows:
        values = list(row)
        for index, convert in converters:
            values[index] = convert(values[index], None, connection)
        found.append(model.from_db(db, names, values))
    return found


_UPDATES: dict[tuple[type, tuple[str, ...]], str] = {}


def save(row: Any, names: list[str]) -> None:
    """``row.save(update_fields=names)``; on PostgreSQL with the UPDATE built once per model
    and fields. For models with no ``pre_save``/``post_save`` receiver (none is sent) and no
    ``auto_now`` field among ``names``. Raises ``DatabaseError`` when no row was updated, as
    the ORM's save does."""
    if connection.vendor != "postgresql":
        row.save(update_fields=names)
        return
    meta = row._meta
    fields = [meta.get_field(name) for name in names]
    key = (type(row), tuple(names))
    sql = _UPDATES.get(key)
    if sql is None:  # names from the model's meta, never from input
        assignments = ", ".join(f'"{field.column}" = %s' for field in fields)
        sql = _UPDATES[key] = (f'UPDATE "{meta.db_table}" SET {assignments} '  # noqa: S608
                               f'WHERE "{meta.pk.column}" = %s')
    params = [field.get_db_prep_save(getattr(row, field.attname), connection)
              for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, row.pk])
        if cursor.rowcount != 1:
            raise DatabaseError(f"{meta.label} {row.pk}: no row updated")
