"""Knowledge-base state shared by every process: installed bundles and upstream watch.

``KnowledgeBaseInstall`` rows are the install history; the newest row is the active bundle
(no row: the built-in knowledge of the repository). ``UpstreamReference`` is one GitHub issue
or pull request a rule cites, with the state the upstream watch last saw and its ETag.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class KnowledgeBaseInstall(models.Model):
    """One signed bundle installed by ``manage.py kb_update`` (newest row = active)."""

    content_hash = models.CharField(max_length=64)
    version = models.CharField(max_length=80)
    #: KnowledgeBase.version of its rules (the hash the Rule mirror and findings carry).
    rules_version = models.CharField(max_length=64)
    created_at = models.DateTimeField(help_text="When the bundle was built (manifest).")
    verified_through = models.CharField(max_length=32, blank=True)
    rule_count = models.PositiveIntegerField(default=0)
    format_version = models.PositiveSmallIntegerField(default=1)
    key_id = models.CharField(max_length=32, blank=True)
    source = models.TextField(help_text="File path or URL it was installed from.")
    path = models.TextField(help_text="Directory it was unpacked to.")
    installed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-installed_at", "-pk"]
        get_latest_by = ["installed_at", "pk"]

    def __str__(self) -> str:
        return self.version


class UpstreamReference(models.Model):
    """A GitHub issue or PR cited by a rule, as the upstream watch last read it.

    ``changed_at`` is when it closed (issue) or merged (PR); ``alerted_at`` is set once the
    one alert about that change was queued, so a change alerts once.
    """

    url = models.URLField(max_length=300, unique=True)
    repo = models.CharField(max_length=140)
    number = models.PositiveIntegerField()
    is_pull = models.BooleanField(default=False)
    state = models.CharField(max_length=16, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    merged_at = models.DateTimeField(null=True, blank=True)
    etag = models.CharField(max_length=200, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    alerted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["repo", "number"]

    def __str__(self) -> str:
        return f"{self.repo.split('/')[-1]}#{self.number}"
