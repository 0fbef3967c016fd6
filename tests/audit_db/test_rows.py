"""audit.rows: rows read and written by hand-written SQL are the ORM's own rows and writes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db.models.signals import post_save, pre_save

from audit import rows
from audit.models import Finding, ServerAuditState
from fleet.models import ChangeEvent, Report, Server

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize("model", [Finding, ServerAuditState, Report])
def test_the_models_rows_saves_have_no_save_receivers(model) -> None:
    """rows.save sends no pre_save/post_save: a receiver added for one of these models
    would be skipped silently, so adding one must move its saves back to the ORM."""
    assert not post_save.has_listeners(model) and not pre_save.has_listeners(model)


@pytest.fixture
def finding(host_factory) -> Finding:
    host = host_factory()
    server = Server.objects.create(host=host, identity="port:8000", pid=1)
    return Finding.objects.create(
        host=host, server=server, rule_id="some-rule", kind="config", severity="high",
        title="t", message="m", references=["https://example.invalid/a"],
        evidence={"nested": {"list": [1, 2.5, None, "x"]}, "flag": True}, first_seen=AT,
        last_seen=AT)


def test_load_builds_the_rows_the_orm_builds(finding) -> None:
    sql = f"SELECT {rows.columns(Finding, 'f')} FROM audit_finding f WHERE id = %s"  # noqa: S608
    loaded, = rows.load(Finding, sql, [finding.pk])
    orm = Finding.objects.get(pk=finding.pk)
    for field in Finding._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(orm, field.attname), field.name
    assert loaded._state.adding is False and loaded._state.db == orm._state.db
    assert rows.load(ChangeEvent, f"SELECT {rows.columns(ChangeEvent, 'c')} "  # noqa: S608
                     "FROM fleet_changeevent c WHERE id = %s", [0]) == []


def test_save_stores_what_the_orms_save_stores(finding) -> None:
    twin = Finding.objects.get(pk=finding.pk)
    twin.pk = twin.id = None  # a second row, changed below by the ORM's own save
    twin.rule_id, twin.code = "other-rule", Finding._meta.get_field("code").get_default()
    twin.save()
    values = {"evidence": {"n": [3, {"k": "v"}]}, "message": "new", "severity": "critical",
              "last_seen": datetime(2026, 11, 29, 9, 0, tzinfo=UTC)}
    for row in (finding, twin):
        for name, value in values.items():
            setattr(row, name, value)
    rows.save(finding, list(values))
    twin.save(update_fields=list(values))
    mine, orm = Finding.objects.get(pk=finding.pk), Finding.objects.get(pk=twin.pk)
    for name in values:
        assert getattr(mine, name) == getattr(orm, name) == values[name]


def test_save_of_a_gone_row_raises(finding) -> None:
    from django.db import DatabaseError

    Finding.objects.filter(pk=finding.pk).delete()
    finding.message = "x"
    with pytest.raises(DatabaseError):
        rows.save(finding, ["message"])
