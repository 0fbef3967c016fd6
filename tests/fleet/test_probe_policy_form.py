"""The host page's probe form answers a wrong interval with a message, never a 500.

``interval_h=596524`` (past PostgreSQL's integer once in seconds) answered 500; any interval
outside one hour .. one year is now refused by the policy with the reason shown.
"""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from fleet.access import set_role
from fleet.models import ProbePolicy

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("interval_h", ["596524", "8785", "9" * 40, "0", "-5", "1e9", "x"])
def test_an_interval_out_of_range_is_a_form_error(client, django_user_model, host_factory,
                                                  interval_h):
    user = django_user_model.objects.create_user("op", password="pw")
    set_role(user, "operator")
    client.force_login(user)
    host = host_factory(machine_id="m-probe")
    response = client.post(f"/hosts/{host.code}/probes/",
                           {"server": "", "action": "enable", "interval_h": interval_h})
    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(shown) == 1 and shown[0].startswith("Probes not enabled:"), shown
    assert not ProbePolicy.objects.exists()


def test_a_year_is_still_accepted(client, django_user_model, host_factory):
    user = django_user_model.objects.create_user("op", password="pw")
    set_role(user, "operator")
    client.force_login(user)
    host = host_factory(machine_id="m-probe")
    client.post(f"/hosts/{host.code}/probes/",
                {"server": "", "action": "enable", "interval_h": "8784"})
    assert ProbePolicy.objects.get().interval_s == 8784 * 3600
