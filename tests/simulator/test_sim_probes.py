"""The demo fleet's h100-push-01: live probes on, its forced tool_choice answered
with prose, so the #50477 advisory reads "confirmed on this server"; its twin h100-push-02
(probes off) is sent no probe and keeps the plain advisory."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_probed_demo_server_confirms_the_forced_tool_choice_advisory(enrolled_fleet):
    from audit.models import Finding

    sim = enrolled_fleet(["h100-push-01", "h100-push-02"])
    sim.run_round()
    probed = Finding.objects.active().get(host__hostname="h100-push-01",
                                          rule_id="gemma4-forced-tool-choice-unenforced")
    plain = Finding.objects.active().get(host__hostname="h100-push-02",
                                         rule_id="gemma4-forced-tool-choice-unenforced")
    assert probed.severity == "medium"
    assert "Confirmed on this server by a live probe" in probed.message
    assert plain.severity == "low" and "live probe" not in plain.message
    twin = sim.nodes["h100-push-02"].servers["main"].behaviour
    assert twin.posts == 0
