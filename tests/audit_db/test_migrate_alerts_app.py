"""An existing database keeps its alert channels, deliveries and permissions when the alert
models move from the audit app to the alerts app.

The database is taken back to the migration state of the last release before the move
(audit 0002, no alerts app: the state a database created at that release has), rows are
written with that state's models, and the database is migrated forward again.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

LAST_AUDIT_BEFORE_MOVE = ("audit", "0002_finding_host_status_index")


def _migrate(before_move: bool):
    """Migrate to the state before the move (every other app at its latest) or to the
    latest of everything; returns the historical apps of the state reached."""
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    if before_move:
        nodes = [n for n in leaves if n[0] not in ("audit", "alerts")] + [LAST_AUDIT_BEFORE_MOVE]
        executor.migrate([*nodes, ("alerts", None)])
    else:
        nodes = leaves
        executor.migrate(nodes)
    executor.loader.build_graph()
    return executor.loader.project_state(nodes).apps


def test_alert_rows_and_role_permissions_survive_the_move_to_the_alerts_app():
    from django.contrib.auth.models import Group

    old = _migrate(before_move=True)
    assert "alertchannel" in {m._meta.model_name for m in old.get_app_config("audit").get_models()}
    content_type = old.get_model("contenttypes", "ContentType")
    permission = old.get_model("auth", "Permission")
    content_type.objects.filter(app_label="alerts").delete()  # the old release had no such app
    ct, _ = content_type.objects.get_or_create(app_label="audit", model="alertchannel")
    perm, _ = permission.objects.get_or_create(content_type=ct, codename="change_alertchannel",
                                               defaults={"name": "Can change alert channel"})
    group = old.get_model("auth", "Group").objects.create(name="ops-admins")
    group.permissions.add(perm)
    channel = old.get_model("audit", "AlertChannel").objects.create(
        kind="webhook", name="pager", destination="https://hooks.example.com/x",
        min_severity="high")
    delivery = old.get_model("audit", "Delivery").objects.create(
        channel=channel, trigger="new_finding", group_key="g1", message={"title": "t"})
    old.get_model("audit", "DeliveryAttempt").objects.create(
        delivery=delivery, number=1, outcome="sent", response_code=200)
    old.get_model("audit", "AlertThrottle").objects.create(
        channel=channel, key="host:rule", last_sent_at=timezone.now())

    _migrate(before_move=False)

    from alerts.models import AlertChannel, AlertThrottle, Delivery, DeliveryAttempt

    moved = AlertChannel.objects.get(name="pager")
    assert moved.pk == channel.pk and moved.destination == "https://hooks.example.com/x"
    [sent] = Delivery.objects.filter(channel=moved)
    assert sent.group_key == "g1" and sent.message == {"title": "t"}
    assert DeliveryAttempt.objects.get(delivery=sent).response_code == 200
    assert AlertThrottle.objects.filter(channel=moved, key="host:rule").exists()
    assert sent.events.count() == 0  # the many-to-many table is still there and readable
    admins = Group.objects.get(name="ops-admins")
    assert {f"{p.content_type.app_label}.{p.codename}" for p in admins.permissions.all()} == {
        "alerts.change_alertchannel"}
