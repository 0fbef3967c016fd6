"""``manage.py explain_argv``: one command line or a batch, as a release would read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from audit.kb.explain import ExplainError, explain_batch


def run(*args: str, capsys) -> str:
    call_command("explain_argv", *args)
    return capsys.readouterr().out


def test_it_explains_a_dev_build_with_its_release_and_gpu_class_defaults(capsys) -> None:
    out = run("--vllm-version", "0.29.1rc1.dev339", "--gpu-name", "NVIDIA H200",
              "--gpu-memory-gib", "139.8", "--format", "json", "--", "vllm", "serve",
              "google/gemma-4-31B-it", "--disable-prefix-caching", "-tp", "2", capsys=capsys)
    answer = json.loads(out)
    assert answer["release"] == "0.29.0"
    assert answer["release_note"] == "0.29.1rc1.dev339 → rules and defaults of 0.29.0"
    assert answer["settings"]["tensor_parallel_size"] == {
        "value": 2, "source": "argv", "detail": "argv"}
    seqs = answer["settings"]["max_num_batched_tokens"]
    assert seqs["value"] == 8192 and seqs["source"] == "default"
    assert "160 * GiB_bytes" in seqs["detail"]  # H200 is below the 0.28+ 160 GiB tier
    assert answer["not_accepted"][0]["flag"] == "--disable-prefix-caching"
    assert answer["not_accepted"][0]["added_in"] == "0.33.0"
    assert answer["settings"]["model"]["value"] == "google/gemma-4-31B-it"


def test_the_same_line_on_0_33_reads_the_inverse_flag_and_the_alias(capsys) -> None:
    out = run("--vllm-version", "0.33.0", "--", "--disable-prefix-caching", "g/m",
              "--device-memory-utilization", "0.94", capsys=capsys)
    answer = json.loads(out)
    assert answer["not_accepted"] == [] and answer["unknown"] == []
    assert answer["settings"]["enable_prefix_caching"]["value"] is False
    assert answer["settings"]["gpu_memory_utilization"]["value"] == 0.94
    assert answer["settings"]["model"]["value"] == "g/m"


def test_output_is_stable_across_runs(capsys) -> None:
    args = ("--vllm-version", "0.15.1", "--", "vllm", "serve", "m", "--swap-space", "4")
    first, second = run(*args, capsys=capsys), run(*args, capsys=capsys)
    assert first == second
    assert list(json.loads(first)) == sorted(json.loads(first))


def test_text_format_names_the_release_and_the_refusals(capsys) -> None:
    out = run("--vllm-version", "0.33.0", "--format", "text", "--", "vllm", "serve", "m",
              "--num-scheduler-steps", "8", "--frobnicate", capsys=capsys)
    assert out.startswith("vLLM 0.33.0: 0.33.0 → rules and defaults of 0.33.0")
    assert "not accepted by 0.33.0: --num-scheduler-steps (removed in 0.11.0)" in out
    assert "unknown options: --frobnicate" in out


def test_batch_answers_every_line_in_order(tmp_path: Path, capsys) -> None:
    batch = tmp_path / "lines.json"
    batch.write_text(json.dumps([
        {"vllm_version": "0.8.5", "gpu": {"name": "NVIDIA A100-SXM4-80GB",
                                          "memory_gib": 79.15, "count": 1},
         "argv": ["vllm", "serve", "m"]},
        {"vllm_version": "0.9.2", "gpu": {"name": "NVIDIA A100-SXM4-80GB",
                                          "memory_gib": 79.15, "count": 1},
         "argv": ["vllm", "serve", "m"]},
        {"vllm_version": None, "gpu": None, "argv": ["--model", "x/y"]},
    ]))
    answers = json.loads(run("--batch", str(batch), capsys=capsys))
    assert [a["release"] for a in answers] == ["0.8.5", "0.9.2", "0.33.0"]
    assert answers[0]["settings"]["max_num_seqs"]["value"] == 1024  # no A100 exclusion yet
    assert answers[1]["settings"]["max_num_seqs"]["value"] == 256
    assert answers[2]["settings"]["model"]["value"] == "x/y"


@pytest.mark.parametrize(("items", "path"), [
    ({"argv": []}, "$"),
    ([{"vllm_version": "0.33.0", "gpu": None, "argv": "vllm serve m"}], "[0].argv"),
    ([{"vllm_version": "0.33.0", "gpu": {"memory_gib": "80"}, "argv": []}], "[0].gpu.memory_gib"),
    ([{"vllm_version": 33, "gpu": None, "argv": []}], "[0].vllm_version"),
])
def test_bad_batch_input_names_the_field(items, path: str) -> None:
    with pytest.raises(ExplainError) as caught:
        explain_batch(items)
    assert caught.value.path == path


def test_the_command_exits_2_with_the_field_path_on_bad_input(tmp_path: Path, capsys) -> None:
    batch = tmp_path / "bad.json"
    batch.write_text(json.dumps([{"vllm_version": "0.33.0", "gpu": 5, "argv": []}]))
    with pytest.raises(SystemExit) as caught:
        call_command("explain_argv", "--batch", str(batch))
    assert caught.value.code == 2
    assert "[0].gpu: must be an object or null" in capsys.readouterr().err


def test_text_format_shows_an_unknown_options_value_as_its_value_not_an_option(capsys) -> None:
    out = run("--vllm-version", "0.11.0", "--format", "text", "--", "vllm", "serve", "m",
              "--max-num-seqs", "8", "--bogus-flag", "3", capsys=capsys)
    assert "unknown options: --bogus-flag\n" in out + "\n"
    assert "3 (possibly the value of --bogus-flag)" in out
    sources = [line.split("[")[1].split("]")[0] for line in out.splitlines()
               if line.startswith("  ") and "[" in line]
    assert sources == sorted(sources, key=["argv", "derived", "default"].index)
    assert sources[0] == "argv" and "default" in sources


def test_json_still_lists_an_unknown_options_value_under_unknown(capsys) -> None:
    answer = json.loads(run("--vllm-version", "0.11.0", "--", "vllm", "serve", "m",
                            "--bogus-flag", "3", capsys=capsys))
    assert answer["unknown"] == ["--bogus-flag", "3"]
    assert list(answer["settings"]) == sorted(answer["settings"])
