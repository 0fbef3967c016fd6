"""Fixtures for the fleet-simulator tests: a built fleet (no dashboard) and a live one.

The live fixtures run the simulator's real agents against pytest-django's ``live_server``
(PostgreSQL), with Celery tasks eager so each accepted report is evaluated in the server
thread, the ingest rate limit lifted (rounds come faster than 1 report / 5 s) and metric
rules due on every report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.specs import HostSpec
from demo.timeline import Event, FleetSim, fleet_specs


@pytest.fixture
def build_fleet(tmp_path: Path) -> Iterator[Callable[..., FleetSim]]:
    """``build_fleet(**kwargs)`` -> a :class:`FleetSim` under ``tmp_path/sim`` (closed after)."""
    built: list[FleetSim] = []

    def build(**kwargs: Any) -> FleetSim:
        sim = FleetSim(kwargs.pop("base", tmp_path / "sim"), **kwargs)
        built.append(sim)
        return sim

    yield build
    for sim in built:
        sim.close()


@pytest.fixture
def eager_dashboard(settings: Any, live_server: Any) -> Iterator[str]:
    """The live server's URL, with tasks eager, no rate limit and metrics due every report."""
    from config.celery import app

    settings.INGEST_RATE = (1000, 1)
    settings.AUDIT_METRICS_INTERVAL_S = 0
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield live_server.url
    app.conf.task_always_eager = before


@pytest.fixture
def enrolled_fleet(build_fleet: Callable[..., FleetSim], eager_dashboard: str,
                   transactional_db: None) -> Callable[..., FleetSim]:
    """``enrolled_fleet(hosts, timeline)``: seed hosts named in ``hosts``, enrolled."""
    from fleet.models import EnrollmentSecret

    def make(hosts: list[str], timeline: tuple[Event, ...] = (), speed: float = 1.0) -> FleetSim:
        specs: list[HostSpec] = [s for s in fleet_specs(include_cases=False)
                                 if s.hostname in hosts]
        sim = build_fleet(specs=specs, timeline=timeline, speed=speed)
        _, secret = EnrollmentSecret.create("simulator-test", max_uses=1000)
        sim.enroll(eager_dashboard, secret)
        return sim
    return make
