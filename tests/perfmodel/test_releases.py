"""The upgrade planner predicts a performance change between releases only where the kernel
data holds both."""

from __future__ import annotations

from seedpoints import H100, host_report, load_metrics, serve

from advice import planner
from advice.perfmodel.releases import release_change
from audit.kb.context import build_context
from audit.kb.perf import aic


def _qwen(version: str):
    rep = host_report(H100, 1, serve("Qwen/Qwen3-8B", "--max-model-len", "8192"), version,
                      metrics=load_metrics(32, 1000, 300, 0.012, 0.05))
    return rep, build_context(rep["servers"][0], rep)


def test_no_change_predicted_where_the_data_holds_one_release():
    rep, ctx = _qwen("0.24.0")
    change = release_change(ctx, "0.25.1")
    assert change["available"] is False
    assert change["summary"] == ("kernel data for Qwen/Qwen3-8B on h100_sxm holds vLLM 0.24.0: "
                                 "no measured prediction between 0.24.0 and 0.25.1")
    plan = planner.plan_server(rep["servers"][0], rep, "0.25.1")
    assert plan["performance"] == change


def test_a_change_between_two_releases_the_data_holds(monkeypatch):
    """aiconfigurator 0.12.0 holds two vLLM releases for one system only (Intel Arc Pro
    B60: 0.20.0 and 0.26.0); the server's GPU label is mapped onto it to run both engines
    on real kernel tables."""
    monkeypatch.setitem(aic.SYSTEMS, "H100 SXM5 80GB HBM3", "b60")
    _, ctx = _qwen("0.20.0")
    change = release_change(ctx, "0.26.0")
    assert change["available"] is True
    assert change["why"].startswith("kernel data for b60 at vLLM 0.20.0 and 0.26.0")
    cur, tgt = change["current"], change["target"]
    assert cur["tpot_s"] > 0 and tgt["tpot_s"] > 0
    assert change["tpot_change"] == round(tgt["tpot_s"] / cur["tpot_s"] - 1, 3)
    assert cur != tgt  # two releases' kernels, two answers
