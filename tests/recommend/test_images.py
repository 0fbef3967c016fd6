"""The recommended ``docker run`` names an image tag that exists (a release the
knowledge base has a table for), mounts a model served from a local path, and keeps the
parsers of the model family the server was decided to be."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from advice.recommend import recommend_report
from advice.recommend.plan import Plan, docker_argv, image_for
from audit.kb.vllm_tables import releases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rkit import AWQ_31B, host_report, serve  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def _image(docker: list[str]) -> str:
    return next(t for t in docker if t.startswith(("vllm/", "rocm/")))


def test_every_recommended_image_is_a_known_release_tag() -> None:
    report = host_report(H100, 1, serve(AWQ_31B, "--reasoning-parser", "gemma4"),
                         version="0.20.2rc1.dev49+g0123abc")
    item = recommend_report(report)["servers"][0]
    assert item["replicas"], item["notes"]
    for replica in item["replicas"]:
        image = _image(replica["docker"])
        tag = image.split(":", 1)[1]
        assert tag == "latest" or tag.removeprefix("v") in releases(), image
        assert "rc" not in tag and "dev" not in tag


def test_an_unreleased_build_gets_the_unpinned_image_and_a_note() -> None:
    plan = Plan(model="org/m", version="0.20.2rc1.dev49", groups=[[{"index": 0}]])
    image, note = image_for(plan)
    assert image == "vllm/vllm-openai:latest"
    assert "0.20.2rc1.dev49" in note
    known = releases()[-1]
    assert image_for(Plan(model="org/m", version=known))[0] == f"vllm/vllm-openai:v{known}"


def test_an_amd_host_is_not_told_to_pin_the_nvidia_image() -> None:
    plan = Plan(model="org/m", version=releases()[-1],
                groups=[[{"index": 0, "name": "AMD Instinct MI300X"}]])
    docker = docker_argv(plan, [0], 8000)
    assert not any(t.startswith("vllm/vllm-openai") for t in docker)
    assert "--gpus" not in docker and "--device=/dev/kfd" in docker


def test_a_model_served_from_a_local_path_is_mounted_into_the_container() -> None:
    report = host_report(H100, 1, ["vllm", "serve", "/model",
                                   "--served-model-name", "gemma-4-31b-it",
                                   "--reasoning-parser", "gemma4", "--tool-call-parser",
                                   "gemma4", "--enable-auto-tool-choice"])
    report["servers"][0].setdefault("model_files", None)
    item = recommend_report(report)["servers"][0]
    for replica in item["replicas"]:
        words = shlex.split(replica["docker_command"])
        assert "/model:/model:ro" in words
        image_at = words.index(_image(words))
        assert words[image_at + 1] == "/model"
        # The decided family (Gemma 4) keeps its own parsers.
        assert words[words.index("--reasoning-parser") + 1] == "gemma4"
        assert words[words.index("--tool-call-parser") + 1] == "gemma4"


def test_max_model_len_never_exceeds_what_the_note_says_tp1_can_serve() -> None:
    """A latency workload with 15-token prompts at TP=1 is not raised to 262144 while the
    note says TP=1 cannot serve documents that long."""
    from rkit import prompt_metrics

    report = host_report(H100, 1, serve(AWQ_31B, "--max-model-len", "32768"),
                         metrics=prompt_metrics([15] * 500, running=1))
    item = recommend_report(report, workload="latency")["servers"][0]
    assert item["layout"] == "1 x TP=1"
    argv = item["replicas"][0]["argv"]
    value = int(argv[argv.index("--max-model-len") + 1])
    note = next(n for n in item["notes"] if n.startswith("--max-model-len"))
    held = int(note.split("holds about ")[1].split(" ")[0])
    assert value <= held < 262144
