"""vLLM's own parser (the installed release's) as the oracle for explain_argv: no server."""

from __future__ import annotations

import json

from tests.real_vllm import record_oracle
from tests.real_vllm.compare import disagreement
from tests.real_vllm.conftest import DATA, RECORD


def test_explain_argv_agrees_with_the_installed_parser(vllm_py: str) -> None:
    corpus = json.loads(record_oracle.CORPUS.read_text())
    release = record_oracle.installed_version(vllm_py)
    assert release == "0.32.0"
    answers = record_oracle.answers(vllm_py, corpus)
    if RECORD:
        record_oracle.record(vllm_py)
    recorded = [c["answer"] for c in json.loads((DATA / "parser_oracle.json").read_text())
                ["cases"]]
    assert answers == recorded, "the recorded parser answers are stale: REAL_VLLM_RECORD=1"
    problems = [f"{' '.join(argv[2:])}: {why}" for argv, answer in zip(corpus, answers,
                                                                       strict=True)
                if (why := disagreement(argv, answer, release))]
    assert problems == []
