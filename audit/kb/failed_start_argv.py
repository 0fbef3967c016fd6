"""Command lines and releases as the failed-start explanation reads and writes them: editing a
reported argv option by option (with the option's arity from the release's flag table), the
command as a shell line, and the release whose tables judge a start (:class:`Release`, which
never passes a stand-in table off as the release that ran).

Split from :mod:`audit.kb.failed_start_explain`, which uses every name here.
"""

from __future__ import annotations

import re
import shlex

from packaging.version import InvalidVersion, Version

from audit.kb.vllm_tables import spelling_index, table

#: The program argparse names in its error line: ``vllm: error: ...`` is the ``vllm`` command
#: (``vllm serve`` ran, so a second ``serve`` is a stray word), ``api_server.py: error: ...``
#: the API server module, which takes no ``serve`` and no positional model.
_PROGRAM = re.compile(r"^\s*(?:[\w.-]+[/\\])*([\w.-]+): error:")


def flag_positions(argv: list[str], spellings: set[str]) -> list[int]:
    return [i for i, t in enumerate(argv)
            if t in spellings or (t.split("=", 1)[0] in spellings and "=" in t)]


def takes(release: str, spelling: str) -> str:
    entry = spelling_index(release).get(spelling)
    if entry is None:
        return "one"
    return table(release)["options"][entry.flag]["takes"]


def edit_argv(argv: list[str], release: str, spelling: str, *, new_flag: str | None = None,
              new_value: str | None = None, drop: bool = False) -> list[str] | None:
    """``argv`` with option ``spelling`` renamed, given ``new_value`` or dropped (with its
    value tokens); None when ``spelling`` is not in argv."""
    spellings = {spelling}
    entry = spelling_index(release).get(spelling)
    if entry is not None:
        spellings |= {s for s, e in spelling_index(release).items() if e.flag == entry.flag}
    positions = flag_positions(argv, spellings)
    if not positions:
        return None
    out = list(argv)
    for index in reversed(positions):
        token = out[index]
        inline = "=" in token
        width_of = takes(release, token.split("=", 1)[0])
        width = 1 if inline or width_of == "none" else 2
        if width_of == "many" and not inline:
            while index + width < len(out) and not out[index + width].startswith("-"):
                width += 1
        if drop:
            del out[index:index + width]
        elif new_flag is not None:
            out[index] = new_flag + ("=" + token.split("=", 1)[1] if inline else "")
        elif new_value is not None:
            if inline:
                out[index] = f"{token.split('=', 1)[0]}={new_value}"
            elif index + 1 < len(out):
                out[index + 1:index + width] = [new_value]
    return out


def command_text(argv: list[str] | None) -> str | None:
    return shlex.join(argv) if argv else None


class Release(str):
    """A table's release (equal to and hashed as that release, so every table lookup reads
    it) whose ``{release:run}`` names the running version when no table of its own exists:
    "vLLM 0.6.4 (judged with the nearest shipped table, 0.8.5)", so no sentence presents the
    substitute table as the release that runs."""

    label: str
    running: str | None

    def __new__(cls, release: str, version: str | None) -> Release:
        made = super().__new__(cls, release)
        running = public_version(version)
        made.running = running
        if running is None:
            # no version reported: the table is a stand-in, never the release that ran
            made.label = f"of unknown version (judged with the {release} table)"
        else:
            made.label = (release if running == release else
                          f"{running} (judged with the nearest shipped table, {release})")
        return made

    def __format__(self, spec: str) -> str:
        # ``{release:run}`` in a sentence about the running release; plain ``{release}``
        # (a table's file name, a lookup) stays the table's release
        return self.label if spec == "run" else super().__format__(spec)


def public_version(version: str | None) -> str | None:
    try:
        return Version(version).public if version else None
    except InvalidVersion:
        return None


#: A placeholder in a reported command (``<model>``, ``${MODEL}``, ``...``): the argv is not
#: the one that ran, so what it lacks says nothing of what the operator left at its default.
PLACEHOLDER = re.compile(r"<[^>]*>|\$\{?\w+|^\.\.\.$|…")


def argv_known(argv: list[str]) -> bool:
    """True when ``argv`` is the command that ran: non-empty, with no placeholder."""
    return bool(argv) and not any(PLACEHOLDER.search(t) for t in argv)


def launcher_word(line: str, word: str, argv: list[str]) -> dict:
    """Explanation fields (``setting``, ``value``, ``summary``, ``change``, ``fix_argv``) of a
    positional ``word`` the launcher refused, read from which program refused it (the error
    line's ``PROG: error:``):

    * ``serve`` refused by ``vllm``: ``vllm serve`` already ran and the command repeats it, as
      when ``vllm serve MODEL`` is written after an image whose entrypoint is ``vllm serve``;
      the fix drops the repeated words and keeps the model first;
    * ``serve`` refused by the API server module: it takes no ``serve``; the model goes in
      ``--model``;
    * any other word: the API server module takes no positional model: ``--model``."""
    match = _PROGRAM.match(line)
    program = match.group(1) if match else None
    if word == "serve" and program == "vllm":
        return {"setting": "serve", "value": word,
                "summary": "the command repeats `vllm serve` after a launcher that already "
                           "runs it (an image whose entrypoint is `vllm serve` takes the "
                           "model as its first word)",
                "change": "drop the repeated `vllm serve`; the model comes first",
                "fix_argv": _without_serve(argv, as_flag=False)}
    if word == "serve":
        return {"setting": "serve", "value": word,
                "summary": "the launcher refused 'serve': it is the API server module (or "
                           "an image whose entrypoint runs it), not `vllm serve`",
                "change": "drop `vllm serve` from the command and pass the model as --model",
                "fix_argv": _without_serve(argv, as_flag=True)}
    out = [t for t in argv if t != "serve"]
    fix = None
    if word in out:
        index = out.index(word)
        fix = out[:index] + ["--model", word] + out[index + 1:]
    return {"setting": "--model", "value": word,
            "summary": f"the launcher refused {word!r}: it is not `vllm serve`, which takes "
                       "the model as a positional word",
            "change": f"pass the model as --model {word} (and no `serve`), or start "
                      "`vllm serve`",
            "fix_argv": fix}


def _without_serve(argv: list[str], as_flag: bool) -> list[str] | None:
    """``argv`` with its last ``[vllm] serve`` taken out (the repeated one, after the image or
    launcher) and, with ``as_flag``, the positional model after it passed as ``--model``;
    None when ``serve`` is not in it."""
    if "serve" not in argv:
        return None
    index = len(argv) - 1 - argv[::-1].index("serve")
    start = index - 1 if index and argv[index - 1] == "vllm" else index
    rest = argv[index + 1:]
    if as_flag and rest and not rest[0].startswith("-"):
        rest = ["--model", *rest]
    return argv[:start] + rest
