"""One quoting for every command the product shows or copies (pages, evidence, CLI, alerts).

An argv word comes from a host (a local user can start a vLLM-looking process with any
words), and an operator pastes what we show into an interactive shell. Single quotes
(:func:`shlex.quote`) stop ``$(…)``, backticks and ``;``, but not the terminal: an ESC
(``\\x1b[201~`` ends a bracketed paste), ``^U`` (erases the line) or a newline inside the
quotes reaches the line editor as a keystroke. So a word holding a control or invisible
character is written as a bash ANSI-C string ``$'…'`` whose every such character is a
``\\xNN`` escape of its UTF-8 bytes: the line shown holds only printable characters, and
bash gives the program the original word back.

Characters escaped (:func:`unsafe`), by Unicode general category (``unicodedata``): ``Cc``
(C0 controls, DEL, C1 controls), ``Cf`` (format: bidi embeddings/overrides/isolates and
marks, zero-width characters, BOM), ``Zl``/``Zp`` (U+2028 line and U+2029 paragraph
separators) and ``Cs`` (lone surrogates, which a JSON ``\\udXXX`` escape can carry).
Source for ``$'…'`` and ``\\xHH``: bash manual, "ANSI-C Quoting"
(https://www.gnu.org/software/bash/manual/bash.html#ANSI_002dC-Quoting). A NUL cannot be
in an argv word at all (ingest refuses ``\\u0000``); it would end the word here too.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Iterable

#: Unicode general categories whose characters never appear raw in a shown command.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def unsafe(char: str) -> bool:
    """True for a character a terminal may act on or hide (:data:`UNSAFE_CATEGORIES`)."""
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def has_unsafe(text: str) -> bool:
    """True when ``text`` holds any :func:`unsafe` character."""
    return any(unsafe(char) for char in text)


def quote(token: object) -> str:
    """One argv word for a POSIX shell line.

    A word of printable characters goes through :func:`shlex.quote` (``'a b'``, ``a``);
    one with an :func:`unsafe` character becomes ``$'…'`` with ``\\`` and ``'`` escaped and
    each unsafe character written as ``\\xNN`` bytes (``'m\\x1b[201~'`` ->
    ``$'m\\x1b[201~'``). The result contains no unsafe character.
    """
    word = str(token)
    if not has_unsafe(word):
        return shlex.quote(word)
    out = []
    for char in word:
        if unsafe(char):
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
        elif char in "\\'":
            out.append("\\" + char)
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def join(argv: Iterable[object], max_chars: int | None = None) -> str:
    """``argv`` as one pasteable line, every word through :func:`quote`.

    ``max_chars``: whole words only up to that length, then `` …`` (never a word cut in the
    middle, which would leave an open quote for the next paste to close).
    """
    words: list[str] = []
    length = 0
    for token in argv:
        word = quote(token)
        if max_chars is not None and length + len(word) + 1 > max_chars:
            words.append("…")
            break
        words.append(word)
        length += len(word) + 1
    return " ".join(words)
