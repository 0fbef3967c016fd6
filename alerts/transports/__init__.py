"""Alert transports: one class per channel kind, found through a registry.

A transport turns one :class:`AlertMessage` (the rendered, transport-neutral content
of a :class:`~audit.models.Delivery`) into one outbound email or HTTP request.
``notify()`` returns the receiver's response code (None for email) or raises
:class:`TransportError`, whose ``permanent`` flag decides between "retry with
backoff" and "stop and mark the channel failing" (house style, examples 2 and 6).

The registry maps ``kind`` to class; ``AlertChannel.kind`` takes its choices from
it, so adding a channel kind is one new module here, never an ``if kind == ...``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

from audit.kb.engine import SEVERITY_RANK


class AlertChannel(Protocol):
    """What a transport reads of its channel (an ``alerts.models.AlertChannel`` row;
    typed structurally so transports never import the models that register them)."""

    destination: str
    secret: str
    bearer_token: str
    basic_username: str
    basic_password: str
    tls_ca: str
    tls_client_cert: str
    tls_client_key: str

#: Channel fields only transports with ``client_options`` accept (HTTP auth and TLS).
CLIENT_OPTION_FIELDS = ("bearer_token", "basic_username", "basic_password", "tls_ca",
                        "tls_client_cert", "tls_client_key")

#: Version tag of the JSON the webhook transport posts (and Delivery.message stores).
MESSAGE_SCHEMA = "fleet-audit.alert/v1"


class TransportError(Exception):
    """A delivery attempt failed.

    ``permanent``: retrying cannot help (4xx, invalid token, refused address);
    ``status_code``: the receiver's HTTP or SMTP code when there was one;
    ``retry_after``: seconds the receiver asked us to wait (HTTP ``Retry-After``).
    """

    def __init__(self, message: str, *, permanent: bool = False,
                 status_code: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status_code = status_code
        self.retry_after = retry_after


@dataclass
class FindingRef:
    """One finding named in an alert (``fixed_in``: the vLLM release that fixes it)."""

    rule_id: str
    title: str
    severity: str
    fixed_in: str = ""
    remediation: str = ""
    url: str = ""


@dataclass
class AlertItem:
    """One host-level line of an alert: an upgrade, a finding, a silent host.

    ``headline`` is short ("0.25.1 → 0.27.0", a finding title), ``detail`` one sentence.
    """

    kind: str
    host: str
    host_url: str
    severity: str
    headline: str
    detail: str = ""
    server: str = ""
    at: str = ""
    findings: list[FindingRef] = field(default_factory=list)


@dataclass
class AlertMessage:
    """Transport-neutral content of one delivery (stored as ``Delivery.message``).

    ``trigger`` is an ``AlertChannel.Trigger`` value; ``severity`` the highest among
    the items; ``url`` a page of the dashboard (absolute, from ``SITE_URL``).
    """

    trigger: str
    title: str
    severity: str
    summary: str
    url: str
    items: list[AlertItem] = field(default_factory=list)
    delivery: str = ""
    channel: str = ""
    created_at: str = ""
    test: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The stable webhook schema (``MESSAGE_SCHEMA``) as a JSON-able dict."""
        return {"schema": MESSAGE_SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertMessage:
        """Inverse of :meth:`as_dict` (unknown keys ignored)."""
        items = [AlertItem(**{**i, "findings": [FindingRef(**f) for f in i.get("findings", [])]})
                 for i in data.get("items", [])]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "items": items})

    def top_findings(self, limit: int = 5) -> list[FindingRef]:
        """Distinct findings across items, most severe first (for short formats)."""
        seen: dict[str, FindingRef] = {}
        for item in self.items:
            for ref in item.findings:
                seen.setdefault(ref.rule_id, ref)
        info = SEVERITY_RANK["info"]
        ordered = sorted(seen.values(), key=lambda r: SEVERITY_RANK.get(r.severity, info))
        return ordered[:limit]


class Transport:
    """Base of every channel kind. Subclasses set ``kind``/``label`` and implement
    :meth:`notify`; they may refine :meth:`validate_destination`."""

    kind: ClassVar[str] = ""
    label: ClassVar[str] = ""
    #: Help text for the destination field of the channel form.
    destination_help: ClassVar[str] = ""
    #: Whether the channel needs a signing secret (generated when blank).
    uses_secret: ClassVar[bool] = False
    #: Whether the channel takes HTTP auth and TLS client options (CLIENT_OPTION_FIELDS).
    client_options: ClassVar[bool] = False
    #: True for a channel that mirrors the open findings' state (Alertmanager) instead of
    #: receiving finding events: the event dispatch skips it (alerts.alertmanager_sync).
    syncs_state: ClassVar[bool] = False

    def __init__(self, channel: AlertChannel) -> None:
        self.channel = channel

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """Return the normalised destination; raise ``ValueError`` with a reason if bad."""
        if not destination.strip():
            raise ValueError("a destination is required")
        return destination.strip()

    @classmethod
    def validate_client_options(cls, channel: AlertChannel) -> None:
        """Raise ``ValueError`` with a reason when ``channel``'s auth/TLS options are set
        but this kind takes none (kinds with ``client_options`` check their values)."""
        if not cls.client_options:
            given = [f for f in CLIENT_OPTION_FIELDS if getattr(channel, f, "")]
            if given:
                raise ValueError(f"{cls.label or cls.kind} channels take no "
                                 f"{', '.join(given)}")

    def notify(self, message: AlertMessage) -> int | None:
        """Send ``message``; return the response code, raise :class:`TransportError`."""
        raise NotImplementedError


REGISTRY: dict[str, type[Transport]] = {}


def register(cls: type[Transport]) -> type[Transport]:
    """Class decorator adding a transport to :data:`REGISTRY` under ``cls.kind``."""
    if not cls.kind or cls.kind in REGISTRY and REGISTRY[cls.kind] is not cls:
        raise ValueError(f"transport kind {cls.kind!r} is empty or already registered")
    REGISTRY[cls.kind] = cls
    return cls


def get_transport(kind: str) -> type[Transport]:
    """The class registered for ``kind``; raises ``KeyError`` naming it when unknown."""
    try:
        return REGISTRY[kind]
    except KeyError:
        raise KeyError(f"no alert transport of kind {kind!r}") from None


def transport_choices() -> list[tuple[str, str]]:
    """``(kind, label)`` pairs for model and form choices (callable, so late kinds show)."""
    return [(kind, cls.label) for kind, cls in sorted(REGISTRY.items())]


# The built-in kinds register themselves on import.
from alerts.transports import alertmanager, email, slack, webhook  # noqa: E402, F401
