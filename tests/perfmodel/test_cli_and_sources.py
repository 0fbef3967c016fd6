"""`manage.py recommend --format json` carries the prediction; its source is named."""

from __future__ import annotations

import io
import json

from seedpoints import H100, POINTS, host_report, load_metrics, report, serve

from advice.perfmodel import predict_commands
from advice.recommend.cli import run_recommend
from audit.kb.context import build_context
from audit.kb.perf import aic


def _recommend(tmp_path, rep) -> dict:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(rep))
    out, err = io.StringIO(), io.StringIO()
    assert run_recommend(str(path), None, "json", out=out, err=err) == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_cli_json_carries_predicted_and_calibrated_figures(tmp_path):
    result = _recommend(tmp_path, report(POINTS["PUSH 16K/1K c128"]))
    pred = result["servers"][0]["prediction"]
    assert pred["status"] == "ok"
    assert pred["load"]["concurrency"] == 128 and pred["load"]["prompt_tokens"] == 16384
    for side in ("current", "recommended"):
        assert set(pred[side]["predicted"]) >= {"tpot_s", "ttft_s", "output_tps"}
        assert pred[side]["calibrated"]["tpot_s"] > pred[side]["predicted"]["tpot_s"]
        assert pred[side]["coverage"]["gpu"] == "H100 SXM5 80GB HBM3"
    assert pred["current"]["calibrated"]["tpot_s"] == 0.193  # the server's own median
    assert "curve" not in pred
    assert result["calibration"] == {"servers": 1, "median_ratio": pred["calibration"]["ratio"],
                                     "spread": 1.0}


def test_cli_json_says_why_there_is_no_prediction(tmp_path):
    point = POINTS["PUSH 16K/1K c128"]
    rep = host_report(point["gpu"], point["gpus"], serve(point["model"], *point["flags"]))
    pred = _recommend(tmp_path, rep)["servers"][0]["prediction"]
    assert pred["status"] == "none"
    assert pred["reason"] == "no prediction: the server sent no /metrics: no observed load"


def _qwen_ctx():
    rep = host_report(H100, 1, serve("Qwen/Qwen3-8B", "--max-model-len", "8192",
                                     "--max-num-seqs", "64"),
                      metrics=load_metrics(32, 1000, 300, 0.012, 0.05))
    return build_context(rep["servers"][0], rep)


def test_kernel_data_where_aiconfigurator_covers_model_and_gpu():
    out = predict_commands(_qwen_ctx(), None)
    assert out["current"]["source"] == "kernel data for h100_sxm, vLLM 0.24.0 (aiconfigurator-core)"
    assert out["current"]["coverage"]["kernel_data"] is True
    assert out["calibration"]["band"] == [0.5, 2.0]


def test_roofline_with_the_reason_when_the_extra_is_absent(monkeypatch):
    monkeypatch.setattr(aic, "available", lambda: False)
    out = predict_commands(_qwen_ctx(), None)
    assert out["current"]["source"].startswith("roofline: H100 SXM5 80GB HBM3 3.35 TB/s")
    assert out["current"]["coverage"]["why"] == \
        "aiconfigurator-core is not installed (pip install '.[perf]')"


def test_awq_gemma_is_outside_the_kernel_data():
    out = predict_commands(build_context(*(lambda r: (r["servers"][0], r))(
        report(POINTS["LIGHT 4K/512 c64"]))), None)
    assert out["current"]["coverage"]["kernel_data"] is False
    assert "not in its support matrix" in out["current"]["coverage"]["why"]


def test_one_model_for_both_commands_when_kernel_data_fails_for_one(monkeypatch):
    """If the kernel model fails for the recommended layout (here TP=2), both commands are
    predicted by the roofline: one server ratio never scales another model's figure."""
    real = aic.step_function

    def flaky(f, load, cover):
        if f.tp == 2:
            raise aic.KernelDataError("PerfDataNotAvailableError: no table for this shape")
        return real(f, load, cover)
    monkeypatch.setattr(aic, "step_function", flaky)
    rep = host_report(H100, 2, serve("Qwen/Qwen3-8B", "--max-model-len", "8192",
                                     "--tensor-parallel-size", "2"))
    tp2 = build_context(rep["servers"][0], rep)
    out = predict_commands(_qwen_ctx(), tp2)
    for side in ("current", "recommended"):
        assert out[side]["source"].startswith("roofline: H100"), side
    assert out["current"]["coverage"]["why"] == \
        "roofline for both commands: kernel data covers only one of them"
    assert out["calibration"]["band"] == [0.8, 6.0]


def test_hostile_gauges_give_no_prediction_not_nan(tmp_path):
    """A NaN running gauge (valid Prometheus text) must not reach the JSON as NaN."""
    text = load_metrics(64, 4096, 512, 0.141, None).replace(
        'vllm:num_requests_running{model_name="m",engine="0"} 64',
        'vllm:num_requests_running{model_name="m",engine="0"} NaN')
    point = POINTS["LIGHT 4K/512 c64"]
    rep = host_report(point["gpu"], point["gpus"], serve(point["model"], *point["flags"]),
                      metrics=text)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rep))
    out = io.StringIO()
    assert run_recommend(str(path), None, "json", out=out, err=io.StringIO()) == 0
    assert "NaN" not in out.getvalue()
    pred = json.loads(out.getvalue())["servers"][0]["prediction"]
    assert pred["status"] == "none"


def test_kernel_tables_without_the_shape_fall_back_to_the_roofline():
    """aiconfigurator 0.12.0 lists Gemma 4 31B NVFP4 on B200 as supported, but its vLLM
    0.24.0 tables lack the sliding-window attention shape with an FP8 KV cache: the
    prediction falls back to the roofline and says why, and the context never raises."""
    rep = host_report("NVIDIA B200", 1, serve(
        "nvidia/Gemma-4-31B-IT-NVFP4", "--max-model-len", "65536", "--kv-cache-dtype", "fp8",
        "--max-num-seqs", "64"), metrics=load_metrics(32, 1000, 300, 0.03, 0.3))
    ctx = build_context(rep["servers"][0], rep)
    assert ctx["perf"]["available"] is True
    assert ctx["perf"]["source"].startswith("roofline: B200")
    out = predict_commands(ctx, ctx)
    why = out["current"]["coverage"]["why"]
    assert why.startswith("aiconfigurator failed on this command (PerfDataNotAvailableError")
    assert why.endswith("roofline instead")
    assert out["calibration"]["band"] == [0.8, 6.0]


def test_cli_text_says_what_it_buys(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report(POINTS["PUSH 4K/512"])))
    out = io.StringIO()
    assert run_recommend(str(path), None, "text", out=out, err=io.StringIO()) == 0
    assert "  what it buys: +9% output tokens/s" in out.getvalue()
