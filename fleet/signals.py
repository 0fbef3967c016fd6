"""What the inventory tells the apps above it, without importing them (docs/architecture.md).

``report_needs_evaluation``: a stored report should be evaluated (sent on commit of an
accepted report and by ``fleet.tasks.sweep_unevaluated``). Keyword argument:
``report_id`` (UUID string), optionally ``host_id`` (int; picks the host's evaluation
shard, ``audit.tasks.evaluation_queue``). The audit app connects the receiver that queues
``audit.tasks.evaluate_report``; a receiver's broker error propagates to the sender, which
leaves the report for the sweep.
"""

from __future__ import annotations

from django.dispatch import Signal

report_needs_evaluation = Signal()
