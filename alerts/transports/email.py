"""Email through Django's email framework (``EMAIL_*`` settings from the environment).

Each message is a subject / plain text / HTML template triple under
``templates/alerts/`` (house style, example 13). SMTP replies classify the
failure: 5xx permanent, 4xx and connection trouble transient (RFC 5321 4.2.1).
"""

from __future__ import annotations

import re
import smtplib

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.validators import validate_email
from django.template.loader import render_to_string

from alerts.transports import AlertMessage, Transport, TransportError, register

#: Seconds to wait for the SMTP server per operation (settings ALERT_SMTP_TIMEOUT_S).
DEFAULT_SMTP_TIMEOUT_S = 10.0
_SPLIT = re.compile(r"[\s,;]+")


def recipients(destination: str) -> list[str]:
    """Addresses in a comma/space/semicolon separated ``destination``."""
    return [a for a in _SPLIT.split(destination) if a]


def render(message: AlertMessage) -> tuple[str, str, str]:
    """``(subject, text, html)`` from the ``alerts/email_*`` templates."""
    context = {"message": message, "findings": message.top_findings(limit=20)}
    subject = " ".join(render_to_string("alerts/email_subject.txt", context).split())
    text = render_to_string("alerts/email_body.txt", context)
    html = render_to_string("alerts/email_body.html", context)
    return subject[:250], text, html


def _smtp_error(exc: Exception) -> TransportError:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        permanent = all(code >= 500 for code in codes)
        return TransportError(f"recipients refused: {exc.recipients}", permanent=permanent,
                              status_code=max(codes, default=None))
    if isinstance(exc, smtplib.SMTPResponseException):
        detail = exc.smtp_error.decode(errors="replace") if isinstance(
            exc.smtp_error, bytes) else str(exc.smtp_error)
        return TransportError(f"SMTP {exc.smtp_code}: {detail}", status_code=exc.smtp_code,
                              permanent=exc.smtp_code >= 500)
    if isinstance(exc, smtplib.SMTPNotSupportedError):
        return TransportError(f"SMTP server does not support a needed extension: {exc}",
                              permanent=True)
    return TransportError(f"SMTP connection failed: {exc!r}")


@register
class EmailTransport(Transport):
    """Send the alert as a multipart (text + HTML) email to the listed addresses."""

    kind = "email"
    label = "Email"
    destination_help = "One or more email addresses, separated by commas."

    @classmethod
    def validate_destination(cls, destination: str) -> str:
        """Normalise to ``a@x, b@y``; raise ValueError naming a malformed address."""
        addresses = recipients(destination)
        if not addresses:
            raise ValueError("at least one email address is required")
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError:
                raise ValueError(f"{address!r} is not an email address") from None
        return ", ".join(addresses)

    def notify(self, message: AlertMessage) -> int | None:
        """Send one email; returns None (SMTP has no response code worth keeping on success).

        Raises TransportError (see module docstring).
        """
        subject, text, html = render(message)
        timeout = float(getattr(settings, "ALERT_SMTP_TIMEOUT_S", DEFAULT_SMTP_TIMEOUT_S))
        try:
            connection = get_connection(timeout=timeout)
            mail = EmailMultiAlternatives(subject, text, to=recipients(self.channel.destination),
                                          connection=connection,
                                          headers={"X-Fleet-Delivery": message.delivery})
            mail.attach_alternative(html, "text/html")
            mail.send()
        except (smtplib.SMTPException, OSError) as exc:
            raise _smtp_error(exc) from None
        return None
