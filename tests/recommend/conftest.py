"""Pure-Python tests (no Django): run with ``.venv/bin/pytest -p no:django tests/recommend``.

tests/conftest.py has an autouse fixture that clears Django's cache; these tests use no
cache and no settings, so the fixture is overridden here by name with a no-op.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """No Django cache to clear in pure-library tests."""
    return None
