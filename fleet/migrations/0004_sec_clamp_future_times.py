"""Clamp times stored in the future before ingest refused them.

A report dated 2099 made every later report look like a late replay; its times are brought
back to when the dashboard received it, and host/server/GPU ``last_seen`` to now.
"""

from django.db import migrations
from django.db.models import F
from django.utils import timezone


def clamp(apps, schema_editor):
    now = timezone.now()
    report = apps.get_model("fleet", "Report")
    report.objects.filter(collected_at__gt=now).update(collected_at=F("received_at"))
    host = apps.get_model("fleet", "Host")
    host.objects.filter(last_collected_at__gt=now).update(last_collected_at=now)
    host.objects.filter(last_seen__gt=now).update(last_seen=now)
    for name in ("Server", "Gpu"):
        apps.get_model("fleet", name).objects.filter(last_seen__gt=now).update(last_seen=now)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0003_sec_enrollment")]
    operations = [migrations.RunPython(clamp, migrations.RunPython.noop)]
