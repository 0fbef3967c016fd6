from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0002_server_metrics_snapshot"),
    ]

    operations = [
        migrations.AddField(
            model_name="server",
            name="failed_start",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
