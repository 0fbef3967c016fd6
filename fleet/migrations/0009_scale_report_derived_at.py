from django.db import migrations, models


def _already_derived(apps, schema_editor):
    # Reports stored before this migration were applied to the inventory at ingest.
    Report = apps.get_model("fleet", "Report")
    Report.objects.filter(derived_at=None).update(derived_at=models.F("received_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0008_ux_gpu_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="report",
            name="derived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(_already_derived, migrations.RunPython.noop),
    ]
