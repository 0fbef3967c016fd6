"""The host page shows the model decision, its geometry and the per-GPU memory budget as a
stacked bar."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_the_host_page_shows_family_geometry_and_the_memory_bar(client, demo_fleet, role_user):
    host = demo_fleet["hosts"][1]  # PUSH recipe: Gemma 4 31B, TP=2 on two H100s
    client.force_login(role_user("viewer"))
    page = client.get(f"/hosts/{host.code}/").content.decode()
    assert "gemma4-31b" in page and "models.yaml" in page  # how the family was decided
    assert "60 layers (10 full 50 sliding" in page
    # SVG rects (x, width in percent of the GPU): the CSP forbids inline style widths.
    segs = [(float(x), float(w)) for x, w in re.findall(
        r'<rect class="seg-\w+" x="([\d.]+)" y="0" width="([\d.]+)"', page)]
    assert len(segs) == 5 and sum(w for _, w in segs) == pytest.approx(100, abs=1)
    assert all(x2 == pytest.approx(x1 + w1, abs=0.2)  # stacked: each starts where one ends
               for (x1, w1), (x2, _) in zip(segs, segs[1:], strict=False))
    assert "GiB for KV" in page  # the arithmetic behind the bar
