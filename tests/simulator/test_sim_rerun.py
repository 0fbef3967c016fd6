"""Re-running the demo reuses the demo's hosts (their saved tokens) instead of
enrolling every host again with new live tokens."""

from __future__ import annotations

import pytest
from django.utils import timezone

from demo.management.commands.simulate_fleet import Command
from fleet.models import AgentToken, Host

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rerun_reuses_live_tokens_and_enrolls_only_revoked_hosts(enrolled_fleet,
                                                                    eager_dashboard):
    hosts = ["h100-chat-05", "h100-batch-06"]
    sim = enrolled_fleet(hosts)
    assert Command()._reusable(sim, eager_dashboard) == frozenset(hosts)
    AgentToken.objects.filter(host__hostname="h100-batch-06").update(revoked_at=timezone.now())
    reused = Command()._reusable(sim, eager_dashboard)
    assert reused == frozenset({"h100-chat-05"})
    sim.enroll(eager_dashboard, Command()._secret(1, revoke=False), skip=reused)
    assert Host.objects.count() == 2
    assert AgentToken.live().count() == 2  # one reused, one new: not four
    assert Command()._reusable(sim, eager_dashboard) == frozenset(hosts)
