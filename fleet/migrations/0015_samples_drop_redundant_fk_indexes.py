"""Drop the single-column foreign-key indexes of the two sample tables.

``(server_id, ts)`` and ``(gpu_id, ts)`` already serve every lookup by server or GPU, so the
single-column indexes only added one index insertion per sample row (one per server and one
per GPU on every report) and their pages to storage.

Only the indexes go: Django's own AlterField would also drop and re-add the foreign-key
constraint, which re-validates every stored sample under a lock on a large fleet. The
statement is the same on PostgreSQL (it drops the partitions' indexes with the parent's) and
on SQLite.
"""

import django.db.models.deletion
from django.db import migrations, models

# The names Django gave the foreign keys' indexes when it created the tables (its schema
# editor's _create_index_name(table, [column], suffix="") hash); 0012 kept them when it made the
# tables partitioned.
DROP = ('DROP INDEX IF EXISTS "fleet_gpusample_gpu_id_3e3b595f";'
        'DROP INDEX IF EXISTS "fleet_metricsample_server_id_1f3a2e23";')
CREATE = ('CREATE INDEX IF NOT EXISTS "fleet_gpusample_gpu_id_3e3b595f" '
          'ON "fleet_gpusample" ("gpu_id");'
          'CREATE INDEX IF NOT EXISTS "fleet_metricsample_server_id_1f3a2e23" '
          'ON "fleet_metricsample" ("server_id");')


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0014_steady_lane'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(DROP, CREATE)],
            state_operations=[
                migrations.AlterField(
                    model_name='gpusample',
                    name='gpu',
                    field=models.ForeignKey(db_index=False,
                                            on_delete=django.db.models.deletion.CASCADE,
                                            related_name='samples', to='fleet.gpu'),
                ),
                migrations.AlterField(
                    model_name='metricsample',
                    name='server',
                    field=models.ForeignKey(db_index=False,
                                            on_delete=django.db.models.deletion.CASCADE,
                                            related_name='samples', to='fleet.server'),
                ),
            ],
        ),
    ]
