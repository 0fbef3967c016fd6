from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0005_sec_evaluation_attempts"),
    ]

    operations = [
        migrations.AddField(
            model_name="server",
            name="failed_start",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
