"""The fleet data model: hosts, their credentials, vLLM servers, GPUs, reports and samples.

Hosts and servers are upserted from each accepted report (:func:`fleet.recording.record_report`);
a server's history (restarts, version and config changes) is kept as
:class:`ChangeEvent` rows so rules can ask "restarted without a change" or
"version changed from X to Y".
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

TOKEN_PREFIX_LEN = 12


def future_cutoff(now: datetime | None = None) -> datetime:
    """Latest believable report time: now + ``settings.COLLECTED_AT_MAX_AHEAD_S`` (clock skew).

    Ingest refuses later ``collected_at`` values (422); a stored time past this cutoff (kept
    from before that check) must not hide newer reports.
    """
    from django.conf import settings

    return (now or timezone.now()) + timedelta(seconds=settings.COLLECTED_AT_MAX_AHEAD_S)


def past_cutoff(now: datetime | None = None) -> datetime:
    """Earliest believable report time: now - ``settings.COLLECTED_AT_MAX_AGE_DAYS``.

    Ingest refuses earlier ``collected_at`` values (422): ``0001-01-01`` stored once made
    every evaluation of the host raise ``OverflowError`` (date minus a window).
    """
    from django.conf import settings

    return (now or timezone.now()) - timedelta(days=settings.COLLECTED_AT_MAX_AGE_DAYS)


def sha256_hex(text: str) -> str:
    """Hex sha256 of a UTF-8 string (how tokens and enrollment secrets are stored)."""
    return hashlib.sha256(text.encode()).hexdigest()


class Host(models.Model):
    """One GPU node, identified by its stable ``machine_id`` (``/etc/machine-id``)."""

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    machine_id = models.CharField(max_length=255, unique=True)
    #: The name the host enrolled with (an admin may rename it): its identity on every page,
    #: export, metric and alert. A report never changes it.
    hostname = models.CharField(max_length=255)
    labels = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(null=True, blank=True)
    #: collected_at of the newest report applied; older (replayed) reports do not roll state back.
    last_collected_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    agent_interval_s = models.PositiveIntegerField(null=True, blank=True)
    os = models.CharField(max_length=255, blank=True)
    kernel = models.CharField(max_length=255, blank=True)
    nvidia_driver_version = models.CharField(max_length=64, blank=True)
    cuda_driver_version = models.CharField(max_length=64, blank=True)
    gpu_error = models.TextField(blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def reported_hostname(self) -> str:
        """The hostname the host's reports give (the newest ``REPORTED_HOSTNAME`` change
        event, recorded when it differs from the enrolled name), else the enrolled name;
        shown beside the enrolled name, never used as the host's identity. One query."""
        reported = (self.events.filter(kind=ChangeEvent.Kind.REPORTED_HOSTNAME)
                    .order_by("-at", "-id").values_list("new_value", flat=True).first())
        return self.hostname if reported is None else reported

    def seconds_since_seen(self, now: datetime | None = None) -> int | None:
        """Whole seconds since the last accepted report, or None if never seen."""
        if self.last_seen is None:
            return None
        return max(0, int(((now or timezone.now()) - self.last_seen).total_seconds()))

    def running_servers(self) -> models.QuerySet[Server]:
        """Servers present in the newest report, ordered by identity."""
        return self.servers.filter(is_running=True).order_by("identity")

    def vllm_versions(self) -> list[str]:
        """Distinct running vLLM versions of this host's running servers (sorted)."""
        versions = {s.vllm_version for s in self.running_servers() if s.vllm_version}
        return sorted(versions)

    def gpu_summary(self) -> str:
        """Human summary such as ``2x NVIDIA H100 80GB HBM3``, or ``no GPUs``."""
        counts: dict[str, int] = {}
        for gpu in self.gpus.filter(is_present=True):
            counts[gpu.name] = counts.get(gpu.name, 0) + 1
        if not counts:
            return "no GPUs"
        return ", ".join(f"{n}x {name}" for name, n in sorted(counts.items()))


#: Most machines one enrollment secret may enroll: an autoscaled node pool's lifetime of new
#: nodes (a pool of 1,000 nodes replaced daily for years stays below it).
MAX_SECRET_USES = 1_000_000
#: Longest lifetime of an enrollment secret, hours (5 years: a node pool's secret is rotated
#: deliberately, never by surprise).
MAX_SECRET_TTL_H = 5 * 365 * 24


class EnrollmentSecret(models.Model):
    """A shared secret agents present to obtain a host token. Stored as sha256.

    A secret enrolls at most ``max_uses`` machines and only until ``expires_at``; revoking it
    revokes every token it minted (a leaked secret must not keep its hosts).
    """

    name = models.CharField(max_length=100)
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    max_uses = models.PositiveIntegerField(default=1)
    uses = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def create(cls, name: str, max_uses: int | None = None,
               valid_for: timedelta | None = None) -> tuple[EnrollmentSecret, str]:
        """Create a secret; returns ``(row, plaintext)``. The plaintext is never stored.

        ``max_uses`` (default ``settings.ENROLL_SECRET_MAX_USES``) enrollments, valid for
        ``valid_for`` (default ``settings.ENROLL_SECRET_TTL_H`` hours). ValueError when
        either is outside 1..:data:`MAX_SECRET_USES` / 1 h..:data:`MAX_SECRET_TTL_H` h.
        """
        from django.conf import settings

        plaintext = "fes_" + secrets.token_urlsafe(24)
        ttl = valid_for if valid_for is not None else timedelta(
            hours=settings.ENROLL_SECRET_TTL_H)
        max_uses = max_uses if max_uses is not None else settings.ENROLL_SECRET_MAX_USES
        if not 1 <= max_uses <= MAX_SECRET_USES:
            raise ValueError(f"uses must be 1 to {MAX_SECRET_USES}, not {max_uses}")
        if not timedelta(hours=1) <= ttl <= timedelta(hours=MAX_SECRET_TTL_H):
            raise ValueError(f"a secret is valid 1 to {MAX_SECRET_TTL_H} hours (5 years)")
        row = cls.objects.create(
            name=name, secret_hash=sha256_hex(plaintext), expires_at=timezone.now() + ttl,
            max_uses=max_uses)
        return row, plaintext

    @classmethod
    def match(cls, plaintext: str) -> EnrollmentSecret | None:
        """The usable secret (unrevoked, unexpired, uses left) matching ``plaintext``."""
        return (cls.objects.filter(secret_hash=sha256_hex(plaintext), revoked_at=None,
                                   uses__lt=models.F("max_uses"))
                .exclude(expires_at__lte=timezone.now()).first())

    def consume(self) -> bool:
        """Count one enrollment; False when another request took the last use first."""
        return EnrollmentSecret.objects.filter(
            pk=self.pk, uses__lt=models.F("max_uses"), revoked_at=None,
        ).update(uses=models.F("uses") + 1, last_used_at=timezone.now()) == 1

    @property
    def state(self) -> str:
        """``revoked``, ``expired``, ``used up`` or ``usable`` (for the Settings page)."""
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= timezone.now():
            return "expired"
        return "used up" if self.uses >= self.max_uses else "usable"

    def revoke(self) -> int:
        """Revoke the secret and every token (live or pending) it minted; returns how many."""
        now = timezone.now()
        self.revoked_at = now
        self.save(update_fields=["revoked_at"])
        return AgentToken.objects.filter(secret=self, revoked_at=None).update(revoked_at=now)


#: Longest a token's ``last_used_at`` lags its last use: once a minute cost an UPDATE on every
#: second report of a 30 s agent; this is the token cache's default lifetime.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=5)


class AgentToken(models.Model):
    """A host's bearer token. Only the sha256 and a short prefix (to recognise it) are kept.

    ``pending``: issued by re-enrolling a machine that still had a live token; it works only
    once an admin approves it in Settings (which revokes the older tokens), so an enrollment
    secret alone cannot take over an existing host.
    """

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=TOKEN_PREFIX_LEN, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    secret = models.ForeignKey(EnrollmentSecret, null=True, blank=True,
                               on_delete=models.CASCADE, related_name="tokens")
    pending = models.BooleanField(default=False)
    requested_hostname = models.CharField(max_length=255, blank=True)
    requested_from = models.GenericIPAddressField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.host})"

    @classmethod
    def issue(cls, host: Host, secret: EnrollmentSecret | None = None, pending: bool = False,
              requested_hostname: str = "", requested_from: str | None = None,
              ) -> tuple[AgentToken, str]:
        """Create a token for ``host``; returns ``(row, plaintext)``, plaintext shown once."""
        plaintext = "fat_" + secrets.token_urlsafe(32)
        row = cls.objects.create(host=host, token_hash=sha256_hex(plaintext),
                                 prefix=plaintext[:TOKEN_PREFIX_LEN], secret=secret,
                                 pending=pending, requested_hostname=requested_hostname,
                                 requested_from=requested_from)
        return row, plaintext

    @classmethod
    def live(cls) -> models.QuerySet[AgentToken]:
        """Tokens that authenticate: unrevoked, approved, minted by an unrevoked secret."""
        return cls.objects.filter(revoked_at=None, pending=False).exclude(
            secret__revoked_at__isnull=False)

    @classmethod
    def lookup(cls, plaintext: str) -> AgentToken | None:
        """The unrevoked token (live or pending) matching ``plaintext``, or None; with its
        ``host`` and ``has_probes`` (the host has an enabled :class:`ProbePolicy`), one query."""
        probes = ProbePolicy.objects.filter(host=models.OuterRef("host_id"), enabled=True)
        return (cls.objects.select_related("host", "secret")
                .filter(token_hash=sha256_hex(plaintext), revoked_at=None)
                .exclude(secret__revoked_at__isnull=False)
                .annotate(has_probes=models.Exists(probes)).first())

    @classmethod
    def authenticate(cls, plaintext: str) -> AgentToken | None:
        """The live token matching ``plaintext`` (with its host), or None."""
        return cls.live().select_related("host").filter(token_hash=sha256_hex(plaintext)).first()

    def revoke(self) -> None:
        """Revoke now; the next request with this token gets 401."""
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])

    def approve(self) -> int:
        """Make a pending token live and revoke the host's other tokens; returns how many."""
        now = timezone.now()
        revoked = AgentToken.objects.filter(host=self.host, revoked_at=None).exclude(
            pk=self.pk).update(revoked_at=now)
        self.pending = False
        self.save(update_fields=["pending"])
        return revoked

    def touch(self) -> None:
        """Record a use, at most once per :data:`TOKEN_TOUCH_INTERVAL` per token to spare the
        database (the host's ``last_seen`` says when it last reported, to the second)."""
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > TOKEN_TOUCH_INTERVAL:
            AgentToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now  # a cached token (fleet.token_cache) is reused


class Report(models.Model):
    """One agent report as received. ``raw`` is the JSON body verbatim."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="reports")
    report_id = models.UUIDField(unique=True)
    schema_version = models.PositiveSmallIntegerField()
    raw = models.JSONField()
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    collected_at = models.DateTimeField()
    evaluated_at = models.DateTimeField(null=True, blank=True, db_index=True)
    #: When the worker applied this report to servers, GPUs, samples and change events
    #: (``fleet.recording.derive_report``); None while only the raw body is stored.
    derived_at = models.DateTimeField(null=True, blank=True)
    evaluation_error = models.TextField(blank=True)
    #: Evaluations of this report that raised; the sweep stops retrying at
    #: ``audit.evaluation.MAX_EVALUATION_ATTEMPTS``.
    evaluation_attempts = models.PositiveSmallIntegerField(default=0)
    #: Kept past the retention window: the version, flags, template or GPUs changed.
    keep = models.BooleanField(default=False)
    keep_reason = models.CharField(max_length=255, blank=True)
    #: sha256 of the body without what changes every cycle (``fleet.lane.steady_key``):
    #: equal keys mean nothing but metrics and GPU readings changed.
    steady_key = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-collected_at"]
        indexes = [
            # The steady lane asks "does this host have a report not yet evaluated?" on
            # every report: a partial index holds only the (few) unevaluated rows.
            models.Index(fields=["host"], condition=models.Q(evaluated_at__isnull=True),
                         name="fleet_report_unevaluated"),
        ]

    def __str__(self) -> str:
        return f"{self.host} @ {self.collected_at:%Y-%m-%d %H:%M:%S}"

    def mark_keep(self, reason: str) -> None:
        """Flag this report to survive pruning, appending ``reason`` (saved by the caller)."""
        self.keep = True
        reasons = [r for r in self.keep_reason.split(", ") if r]
        if reason not in reasons:
            reasons.append(reason)
        self.keep_reason = ", ".join(reasons)[:255]


class SteadyLane(models.Model):
    """A host whose next reports may be applied in the request (``fleet.lane``): written by
    the worker after it evaluated the host's newest report, used by ingest while reports
    carry the same ``key`` and arrive before ``until``.

    ``servers``: ``[[identity, server_id], ...]`` of the running servers; ``gpus``:
    ``[[uuid, gpu_id], ...]`` of the present GPUs; ``until``: the earliest time any of the
    host's servers is due for its metric rules (or for the refresh of its findings).
    """

    host = models.OneToOneField(Host, on_delete=models.CASCADE, primary_key=True,
                                related_name="steady_lane")
    key = models.CharField(max_length=64)
    until = models.DateTimeField()
    servers = models.JSONField(default=list)
    gpus = models.JSONField(default=list)
    armed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"steady lane of host {self.host_id} until {self.until:%H:%M:%S}"


class Server(models.Model):
    """One vLLM API-server process slot on a host.

    ``identity`` is stable across restarts: ``port:8000`` (from base_url or argv)
    or ``unix:/path.sock``. pid/started_at identify the current process.
    """

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="servers")
    identity = models.CharField(max_length=255)
    base_url = models.CharField(max_length=500, blank=True)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField(null=True, blank=True)
    argv = models.JSONField(default=list)
    env = models.JSONField(default=dict, blank=True)  # redacted by the agent
    container_image = models.CharField(max_length=500, blank=True)
    vllm_version = models.CharField(max_length=128, blank=True)
    installed_vllm_version = models.CharField(max_length=128, blank=True)
    previous_vllm_version = models.CharField(max_length=128, blank=True)
    model_ids = models.JSONField(default=list, blank=True)
    max_model_len = models.PositiveIntegerField(null=True, blank=True)
    gpu_uuids = models.JSONField(default=list, blank=True)
    chat_template_source = models.CharField(max_length=1000, blank=True)
    chat_template_sha256 = models.CharField(max_length=64, blank=True)
    chat_template_size = models.PositiveIntegerField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    is_running = models.BooleanField(default=True)
    restart_count = models.PositiveIntegerField(default=0)
    last_report = models.ForeignKey(Report, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    #: The previous /metrics scrape of the current process, parsed
    #: (``audit.kb.metrics.MetricSnapshot.to_json``), for per-interval deltas.
    last_metrics_snapshot = models.JSONField(null=True, blank=True)
    last_metrics_at = models.DateTimeField(null=True, blank=True)
    #: The slot's current failed start, None while it runs or was never seen failing:
    #: ``{"entry": <wire FailedStart>, "first_seen", "last_seen": ISO time, "report_id",
    #: "observations": [[ISO time, cumulative restarts], ...]}`` (fleet.recording).
    failed_start = models.JSONField(null=True, blank=True)
    #: The Kubernetes pod of the current process, the wire's ``servers[].kubernetes``:
    #: ``{"namespace", "pod", "container", "pod_uid"}`` (parts may be null); None off Kubernetes.
    kubernetes = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "identity"],
                                               name="server_identity_per_host")]
        ordering = ["host", "identity"]

    def __str__(self) -> str:
        return f"{self.host} {self.identity}"

    @property
    def pending_upgrade(self) -> bool:
        """True when the package on disk differs from the running version."""
        return bool(self.installed_vllm_version and self.vllm_version
                    and self.installed_vllm_version != self.vllm_version)


class ChangeEvent(models.Model):
    """A recorded change on a host or one of its servers (the restart/version history)."""

    class Kind(models.TextChoices):
        SERVER_STARTED = "server_started", "server first seen"
        RESTART = "restart", "restart"
        VERSION_CHANGED = "version_changed", "vLLM version changed"
        INSTALLED_VERSION_CHANGED = "installed_version_changed", "installed vLLM changed"
        CONFIG_CHANGED = "config_changed", "command line changed"
        TEMPLATE_CHANGED = "template_changed", "chat template changed"
        SERVER_STOPPED = "server_stopped", "server gone"
        GPUS_CHANGED = "gpus_changed", "GPUs changed"
        #: The reports' own hostname changed (it never renames the enrolled host).
        REPORTED_HOSTNAME = "reported_hostname", "reported hostname changed"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="events")
    server = models.ForeignKey(Server, null=True, blank=True, on_delete=models.CASCADE,
                               related_name="events")
    report = models.ForeignKey(Report, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="events")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    at = models.DateTimeField(db_index=True)
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.old_value} -> {self.new_value}"


class Gpu(models.Model):
    """One GPU of a host, with its static facts and latest readings."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    uuid = models.CharField(max_length=128)
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=255)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    compute_capability = models.CharField(max_length=16, blank=True)
    #: AMD GPUs: the gfx target (``gfx942``) AMD SMI reports, in place of a compute capability.
    gfx_arch = models.CharField(max_length=64, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    cuda_version = models.CharField(max_length=64, blank=True)
    memory_used_bytes = models.BigIntegerField(null=True, blank=True)
    utilization_pct = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_draw_w = models.FloatField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    is_present = models.BooleanField(default=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "uuid"], name="gpu_uuid_per_host")]
        ordering = ["host", "index"]
        verbose_name, verbose_name_plural = "GPU", "GPUs"

    def __str__(self) -> str:
        return f"{self.host} GPU{self.index} {self.name}"


class MetricSample(models.Model):
    """Derived per-interval values for one server (from ``audit.kb.metrics.window``).

    Null means the exposition lacked the data, never zero. Times in seconds, rates in tok/s.
    """

    # db_index=False: the (server, ts) index below serves every lookup by server; a second
    # index on server alone only cost one more index insertion per sample.
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="samples",
                               db_index=False)
    report = models.ForeignKey(Report, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    ts = models.DateTimeField()
    window_s = models.FloatField(null=True, blank=True)
    window_kind = models.CharField(max_length=16, blank=True)  # "delta" | "lifetime"
    kv_cache_usage = models.FloatField(null=True, blank=True)
    requests_running = models.FloatField(null=True, blank=True)
    requests_waiting = models.FloatField(null=True, blank=True)
    generation_tps = models.FloatField(null=True, blank=True)
    prompt_tps = models.FloatField(null=True, blank=True)
    ttft_p50_s = models.FloatField(null=True, blank=True)
    ttft_p99_s = models.FloatField(null=True, blank=True)
    tpot_p50_s = models.FloatField(null=True, blank=True)
    tpot_p99_s = models.FloatField(null=True, blank=True)
    itl_p50_s = models.FloatField(null=True, blank=True)
    itl_p99_s = models.FloatField(null=True, blank=True)
    preemptions = models.FloatField(null=True, blank=True)
    prefix_cache_hit_rate = models.FloatField(null=True, blank=True)
    spec_acceptance_rate = models.FloatField(null=True, blank=True)
    spec_mean_acceptance_length = models.FloatField(null=True, blank=True)
    #: The rest of the window dict (JSON-able), e.g. spec_per_position, missing, errors.
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["server", "ts"])]
        ordering = ["server", "ts"]

    def __str__(self) -> str:
        return f"{self.server} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class GpuSample(models.Model):
    """One GPU reading per report: bytes, percent, °C, watts."""

    # db_index=False: the (gpu, ts) index below serves every lookup by GPU.
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="samples",
                            db_index=False)
    ts = models.DateTimeField()
    memory_used_bytes = models.BigIntegerField(null=True, blank=True)
    utilization_pct = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_draw_w = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["gpu", "ts"])]
        ordering = ["gpu", "ts"]

    def __str__(self) -> str:
        return f"{self.gpu} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class ProbePolicy(models.Model):
    """Opt-in live probes for one server of a host, or every server of it.

    Off by default: no row, no probe. ``server_identity`` blank means every server of the
    host. ``names`` lists probe names (``fleet_agent.schema.PROBE_NAMES``). ``interval_s``:
    seconds between two runs on one server, never under :data:`MIN_PROBE_INTERVAL_S`.
    ``last_requested``: ``{server identity: ISO time}`` of the last request sent to the agent.
    """

    #: One probe run per server per hour at most (probes are rare and tiny).
    MIN_PROBE_INTERVAL_S = 3600
    #: At most a year between two runs: longer means off, and ``interval_s`` is a PostgreSQL
    #: integer (2**31 - 1 s) that ``596524`` hours already overflowed.
    MAX_PROBE_INTERVAL_S = 366 * 24 * 3600

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="probe_policies")
    server_identity = models.CharField(max_length=255, blank=True)
    names = models.JSONField(default=list)
    interval_s = models.PositiveIntegerField(default=24 * 3600)
    enabled = models.BooleanField(default=True)
    enabled_by = models.CharField(max_length=150, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    last_requested = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "server_identity"],
                                    name="probe_policy_per_server"),
            models.CheckConstraint(condition=models.Q(interval_s__gte=3600),
                                   name="probe_interval_at_least_an_hour"),
        ]

    def __str__(self) -> str:
        return f"probes {self.host} {self.server_identity or '(all servers)'}"
