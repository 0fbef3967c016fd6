"""Shared fixtures of the planner-page tests."""

from __future__ import annotations

import pytest

from advice import planner


@pytest.fixture
def plan_calls(monkeypatch):
    """Targets ``planner.plan_server`` was called with (every planning evaluates through it)."""
    calls: list[str] = []
    real = planner.plan_server

    def spy(server, report, target, *args, **kwargs):
        calls.append(target)
        return real(server, report, target, *args, **kwargs)
    monkeypatch.setattr(planner, "plan_server", spy)
    return calls
