"""A replayed real fleet: simulated GPU nodes the real ``fleet-agent`` collects from.

Modules: :mod:`.procnode` (``/proc``-shaped trees), :mod:`.traffic` and
:mod:`.exposition` (``/metrics`` counters and histograms in each version's naming era,
built on the real captures of ``demo/data/cases/metrics``), :mod:`.emulator` (the vLLM HTTP
endpoints), :mod:`.specs`, :mod:`.seedfleet`, :mod:`.cases` and :mod:`.casehosts` (the hosts:
seed recipes and one per real bug report), :mod:`.node` (a running node and its agent) and
:mod:`.timeline` (the demo's scenarios). Entry point: ``manage.py simulate_fleet``.

The agent tests use the same fake node, emulator and case loader (:mod:`.procnode`,
:mod:`.emulator`, :mod:`.cases`); those import no Django, Celery or psycopg.
"""
