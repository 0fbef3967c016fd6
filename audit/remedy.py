"""One remedy per failed-start incident, said the same way everywhere.

A server that stops starting (a crash loop, often right after an upgrade) gets exactly one
remedy, and the crash-loop finding, its alert, the host page's "What to do" box, the
failed-start block and the upgrade plan all show this one (they call :func:`remedy`):

1. after an upgrade (the release installed differs from the one that last ran): go back to
   the release that ran, pinned exactly (``pip install vllm==X``, or the ``vllm/vllm-openai:vX``
   image tag for a container), plus the dependency pin the matched rule's remediation names
   when the cause is a dependency (``transformers==5.14.1``);
2. otherwise, when the matched rule has a ``fixed_in`` release newer than the installed one
   and the knowledge base has verified it: that release, pinned the same way;
3. otherwise the matched rule's own remediation (or "read the full log").

A release the knowledge base marks risky is never the remedy without the risk named: the
pin-back is to the release that ran on this server, and a ``fixed_in`` target is only used
when it is within ``verified_through``.

:func:`remedy` returns ``{"kind": "pin_back"|"fixed_release"|"rule", "release",
"dependency_pin", "command", "text"}`` (``command``: the shell line or None; ``text``: one
sentence, the same in every place).
"""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

#: ``package==version`` pins in a remediation text (the dependency a crash needs pinned).
PIN_RE = re.compile(r"\b([A-Za-z][A-Za-z0-9_.\-]*)==(\d[\w.+\-]*)")


def _newer(a: str | None, b: str | None) -> bool:
    try:
        return bool(a and b) and Version(str(a)) > Version(str(b))
    except InvalidVersion:
        return False


def dependency_pin(remediation: str | None) -> str | None:
    """The first ``pkg==X`` pin in a rule's remediation that is not vLLM itself."""
    for name, version in PIN_RE.findall(remediation or ""):
        if name.lower() != "vllm":
            return f"{name}=={version.rstrip('.')}"
    return None


def install_line(release: str, image: str | None, pin: str | None) -> str:
    """``pip install vllm==X [pkg==Y]``, or the image tag for a containerised server."""
    if image:
        repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        line = f"run the image {repo}:v{release}"
        return line + (f" with {pin} installed in it" if pin else "")
    return f"pip install vllm=={release}" + (f" {pin}" if pin else "")


def remedy(*, ran: str | None, installed: str | None, image: str | None,
           rules: list[Any], verified_through: str | None) -> dict[str, Any]:
    """The one remedy of a failed start (see the module docstring). ``rules``: the
    knowledge-base rules whose log signatures matched, best first (objects with ``id``,
    ``fixed_in``, ``remediation``); ``image``: the container image when containerised."""
    first = rules[0] if rules else None
    pin = dependency_pin(getattr(first, "remediation", None))
    upgraded = bool(ran and installed and ran != installed)
    if upgraded:
        command = install_line(str(ran), image, pin)
        cause = f" ({first.id})" if first else ""
        text = (f"Roll back to vLLM {ran}, the release that ran on this server before the "
                f"upgrade to {installed} failed to start{cause}: {command}"
                + (f" (the crash comes from {pin.split('==')[0]}; keep it pinned)" if pin
                   else "") + ", then restart with the same command.")
        return {"kind": "pin_back", "release": ran, "dependency_pin": pin,
                "command": command, "text": text}
    fixed = getattr(first, "fixed_in", None)
    if fixed and _newer(fixed, installed) and not _newer(fixed, verified_through):
        command = install_line(str(fixed), image, None)
        text = (f"Upgrade to vLLM {fixed}, the release that fixes {first.id}: {command}, "
                "then restart with the same command.")
        return {"kind": "fixed_release", "release": fixed, "dependency_pin": None,
                "command": command, "text": text}
    text = " ".join(str(getattr(first, "remediation", "") or "").split()) or (
        "Read the full log of the unit or container and fix the cause, or roll back to the "
        "last release and flags that ran.")
    return {"kind": "rule", "release": None, "dependency_pin": pin, "command": None,
            "text": text}
