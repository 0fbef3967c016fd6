"""Judgements a user reads as statements of fact: each comes from the model's, the log's or
the release's facts where they exist, and a generic alarm does not contradict what a failed
start already established. Evaluated with the shipped rules on built reports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from audit.kb.context import build_context
from audit.kb.engine import load_rules
from fleet_agent.template_markers import extract

DATA = Path(__file__).resolve().parents[1] / "data"
L40 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA L40", "memory_total_bytes": 48 * 2**30,
       "compute_capability": "8.9"}


@pytest.fixture(scope="module")
def kb():
    return load_rules()


def config(stem: str) -> dict:
    """``model_files`` as the agent sends it, with a ``tests/data/model_configs`` config."""
    found = json.loads((DATA / "model_configs" / f"{stem}.json").read_text())
    found.pop("_source", None)
    return {"source": f"/models/{stem}", "config": found, "weights_bytes": None, "errors": []}


def template(name: str) -> dict:
    data = (DATA / "chat_templates" / name).read_bytes()
    return {"source": f"/models/x/{name}", "sha256": hashlib.sha256(data).hexdigest(),
            "size_bytes": len(data), "markers": extract(data)}


def fired(kb, argv: list[str], *, version: str | None = "0.9.2", gpus: list | None = None,
          model_files: dict | None = None, chat_template: dict | None = None) -> dict:
    server = {"pid": 1, "base_url": "http://127.0.0.1:8000", "vllm_version": version,
              "installed_vllm_version": version, "argv": ["vllm", "serve", *argv]}
    if model_files:
        server["model_files"] = model_files
    if chat_template:
        server["chat_template"] = chat_template
    report = {"host": {"hostname": "h"}, "gpus": [L40] if gpus is None else gpus,
              "servers": [server]}
    return {f.rule_id: f for f in kb.evaluate(build_context(server, report))}


R1_ON_QWEN3 = "upx-qwen3-deepseek-r1-reasoning-parser"
R1 = ["--reasoning-parser", "deepseek_r1"]


def test_an_always_thinking_qwen2_model_is_not_called_a_qwen3_hybrid(kb) -> None:
    """QwQ is a Qwen2-architecture model that always thinks: deepseek_r1 is its parser, by
    its name alone and when its config says model_type qwen2."""
    assert R1_ON_QWEN3 not in fired(kb, ["/weights/Qwen/QwQ-32B-FP8-Dynamic", *R1])
    assert R1_ON_QWEN3 not in fired(kb, ["/weights/QwQ-32B", *R1],
                                    model_files=config("qwen2.5-7b"))


def test_config_facts_overrule_a_qwen3_looking_name(kb) -> None:
    """A directory named like Qwen3 whose config.json is a Qwen2 model is not a Qwen3."""
    assert R1_ON_QWEN3 not in fired(kb, ["/models/qwen3-distill-7b", *R1],
                                    model_files=config("qwen2.5-7b"))


def test_a_qwen3_with_the_hybrid_template_is_flagged_and_says_how_it_was_decided(kb) -> None:
    found = fired(kb, ["Qwen/Qwen3-8B", *R1], model_files=config("qwen3-8b"),
                  chat_template=template("Qwen-Qwen3-0.6B.jinja"))[R1_ON_QWEN3]
    assert found.severity == "medium" and "enable_thinking switch" in found.message
    by_config = fired(kb, ["Qwen/Qwen3-8B", *R1], model_files=config("qwen3-8b"))
    assert "config.json model_type qwen3" in by_config[R1_ON_QWEN3].message
    by_name = fired(kb, ["Qwen/Qwen3-32B", *R1])
    assert "model name" in by_name[R1_ON_QWEN3].message


def test_a_template_without_the_thinking_switch_is_not_hybrid(kb) -> None:
    """The template's markers say whether thinking can be switched off: without the switch
    the deepseek_r1 parser's handling of a missing think block never arises."""
    assert R1_ON_QWEN3 not in fired(kb, ["Qwen/Qwen3-8B", *R1], model_files=config("qwen3-8b"),
                                    chat_template=template("Qwen-Qwen2.5-7B-Instruct.jinja"))


# ------------------------------------------------------------ "architecture not supported"

def _oldest_table_arch() -> tuple[str, str]:
    """(an architecture the oldest capability table registers, that table's release)."""
    from audit.kb.release_caps import architecture_index, releases

    oldest = releases()[0]
    return sorted(a for a, rels in architecture_index().items() if rels[0] == oldest)[0], oldest


def test_an_architecture_the_errors_own_list_names_is_a_failed_load_not_a_release_gap(
        ) -> None:
    """vLLM's refusal lists the architecture among the supported ones: the release has it,
    so no release is advised and the cause is the install's failed import."""
    from audit.kb.failed_start_explain import explain

    arch, _ = _oldest_table_arch()
    refusal = f"ValueError: Model architectures ['{arch}'] are not supported for now."
    listing = f"Supported architectures: ['AquilaModel', '{arch}', 'OPTForCausalLM']"
    for lines in ([f"{refusal} {listing}"], [refusal, listing]):
        found = explain(lines, ["vllm", "serve", "m"], "0.6.1.post1")
        assert found.kind == "architecture_load_failed" and found.confidence == "medium"
        assert "lists" in found.summary and "failed to load" in found.summary
        assert "does not register" not in found.summary
        assert found.change is None and found.changed_in is None


def test_a_release_older_than_every_table_is_not_said_to_lack_what_the_oldest_has() -> None:
    """Without the list, a release older than every table is said to likely predate an
    architecture the oldest table has (the way to a release that has it stays), never that
    the substitute table lacks it."""
    from audit.kb.failed_start_explain import explain

    arch, oldest = _oldest_table_arch()
    found = explain([f"ValueError: Model architectures ['{arch}'] are not supported for now."],
                    ["vllm", "serve", "m"], "0.6.1.post1")
    assert "does not register" not in found.summary and "likely predates" in found.summary
    assert found.changed_in == oldest and f"run vLLM {oldest}" in found.change


def test_a_list_that_does_not_name_the_architecture_changes_nothing() -> None:
    """A cut list (the agent keeps the start of a long line) is no evidence either way."""
    from audit.kb.failed_start_explain import explain
    from audit.kb.release_caps import architecture_index, releases

    known = list(releases())
    arch, having = next((a, r) for a, r in sorted(architecture_index().items())
                        if r[0] != known[0])
    before = known[known.index(having[0]) - 1]
    found = explain([f"ValueError: Model architectures ['{arch}'] are not supported for now. "
                     "Supported architectures: ['AquilaModel', 'ArcticForCausalLM', 'Bai"],
                    ["vllm", "serve", "m"], before)
    assert found.kind == "raise_site" and found.changed_in == having[0]
    assert "does not register" in found.summary


# ------------------------------------------------------------ version- and state-bound alarms

MLA_FP8 = ["deepseek-ai/DeepSeek-V3", "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "8"]
H100S = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H100 80GB HBM3",
          "memory_total_bytes": 85520809984, "compute_capability": "9.0"} for i in range(8)]


def test_fp8_kv_on_mla_states_a_releases_behaviour_only_when_the_version_is_known(kb) -> None:
    unknown = fired(kb, MLA_FP8, version=None, gpus=H100S)["up-mla-fp8-kv-cache"]
    assert "not known" in unknown.message and "aborts" not in unknown.message
    old = fired(kb, MLA_FP8, version="0.8.5", gpus=H100S)["up-mla-fp8-kv-cache"]
    assert "0.8.5" in old.message and "start-up aborts" in old.message
    new = fired(kb, MLA_FP8, version="0.12.0", gpus=H100S)["up-mla-fp8-kv-cache"]
    assert "depends on the attention backend" in new.message and "aborts" not in new.message


def test_the_geforce_start_up_hang_is_not_predicted_for_a_server_seen_serving(kb) -> None:
    from tests.audit.casekit import metrics_text, server_entry

    cards = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA GeForce RTX 4090",
              "memory_total_bytes": 24 * 2**30, "compute_capability": "8.9"} for i in range(4)]
    argv = ["Qwen/Qwen2.5-72B-Instruct-AWQ", "--tensor-parallel-size", "4"]
    assert "upx-geforce-tp-nccl-p2p" in fired(kb, argv, version="0.6.3", gpus=cards)
    server = server_entry(["vllm", "serve", *argv], "0.6.3",
                          gpu_uuids=[g["uuid"] for g in cards],
                          metrics=metrics_text({"running": 4, "waiting": 30,
                                                "kv_cache_usage": 0.2}, "0.6.3", argv[0]))
    report = {"host": {"hostname": "h"}, "gpus": cards, "servers": [server]}
    serving = {f.rule_id for f in kb.evaluate(build_context(server, report))}
    assert "upx-geforce-tp-nccl-p2p" not in serving
