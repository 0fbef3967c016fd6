"""Stored upgrade plans: one row per server and target release.

The worker writes them (:mod:`advice.plans`) when a server's configuration was evaluated
(its audit config fingerprint changed: version, installed version, argv, env, model files,
template, GPUs, live probes or knowledge-base version), so the planner pages read verdicts
instead of evaluating every server once per candidate release on a visit.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ServerPlan(models.Model):
    """What moving one server to ``target`` would do (:func:`advice.planner.plan_server`).

    A row is current while ``config_fingerprint`` equals the server's
    ``audit_state.config_fingerprint`` (the configuration the worker last evaluated) and
    ``kb_version`` is the active knowledge base's; pages ignore any other row.
    """

    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE, related_name="plans")
    #: PEP 440 form of the target release (``0.27.0``).
    target = models.CharField(max_length=64)
    #: True for the installed-but-not-running version ("will become X on next restart").
    pending = models.BooleanField(default=False)
    #: ``safe`` | ``risky`` | ``blocked`` (:func:`advice.planner.verdict`).
    verdict = models.CharField(max_length=16)
    #: The :func:`advice.planner.plan_server` dict (JSON-safe; no ``server`` key).
    plan = models.JSONField()
    #: :func:`audit.evaluation.config_fingerprint` of the server entry planned (sha256 hex).
    config_fingerprint = models.CharField(max_length=64)
    #: :func:`advice.planner.server_fingerprint`: servers of one configuration share plans.
    fingerprint = models.CharField(max_length=64, db_index=True)
    kb_version = models.CharField(max_length=64)
    planned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "pending", "target"],
                                               name="one_plan_per_server_target")]
        indexes = [models.Index(fields=["target", "pending"], name="plan_target")]

    def __str__(self) -> str:
        return f"plan of {self.server_id} to {self.target}: {self.verdict}"
