"""Django settings for vLLM Fleet Audit, read from the environment only.

Nothing else in the project reads ``os.environ``; ``config/env.py`` holds the
strict readers and ``.env.example`` lists every variable. Commands that do not
serve (``check``, ``migrate``, offline audits) import these settings on a fresh
clone with no environment at all; a missing ``SECRET_KEY`` outside DEBUG is the
system check ``fleet.E001`` and makes ``config/wsgi.py`` refuse to start.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import READ as _env_read
from config.env import env_bool, env_int, env_list, env_rate, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DEBUG", False)

_secret = env_str("SECRET_KEY")
#: True when SECRET_KEY was not set outside DEBUG: check fleet.E001 fails, wsgi refuses.
SECRET_KEY_MISSING = _secret is None and not DEBUG
#: .env.example's placeholder: copied unchanged it is as good as no key (check fleet.E002).
SECRET_KEY_PLACEHOLDER = "change-me-to-a-long-random-string"  # noqa: S105 - the known bad value
SECRET_KEY_IS_PLACEHOLDER = _secret == SECRET_KEY_PLACEHOLDER and not DEBUG
# A random per-process key keeps non-serving commands working; sessions signed
# with it die with the process, which is why serving refuses to start with it.
SECRET_KEY = _secret or ("insecure-demo-key-debug-only" if DEBUG else secrets.token_urlsafe(50))

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
SITE_URL = (env_str("SITE_URL", "http://127.0.0.1:8000") or "").rstrip("/")
if not SITE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"SITE_URL must start with http:// or https://, got {SITE_URL!r}")
CSRF_TRUSTED_ORIGINS = [SITE_URL]

_database_url = env_str("DATABASE_URL")
if _database_url is None:
    VAR_DIR.mkdir(exist_ok=True)  # the embedded demo's SQLite file lives in var/
try:
    DATABASES = {
        "default": dj_database_url.parse(
            _database_url or f"sqlite:///{VAR_DIR / 'fleet.sqlite3'}",
            conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
            conn_health_checks=True,
        )
    }
except ValueError as exc:  # unknown scheme or malformed URL
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default serves pages while the demo's fleet writes reports: WAL lets
    # readers run beside the writer, a busy timeout waits (seconds) instead of answering
    # "database is locked", and IMMEDIATE transactions take the write lock up front so two
    # writers queue rather than deadlock on a lock upgrade (Django 5.1+ SQLite options).
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    })
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django turns psycopg's prepared statements off (``prepare_threshold`` None). Its own
    # queries bind on the client and are never prepared either way; the ingest's hot
    # statements (fleet.lane, fleet.recording) bind on the server and are then prepared on
    # each connection, so PostgreSQL stops parsing and planning them on every report
    # (about a third of its CPU per steady report, bench/evaluation_throughput.py). 5 runs
    # before preparing is psycopg's own default (psycopg docs, "Prepared statements").
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL is not None and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL, got {REDIS_URL!r}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "ninja",
    "fleet",
    "audit",
    "alerts",
    "advice",
    "front",
    "demo",  # management commands of the replayed demo fleet (make demo); no models
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "fleet.middleware.ContentSecurityPolicyMiddleware",
    "fleet.middleware.RefuseNulQueryMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
#: Failed sign-ins allowed per (client address, username) within the window
#: (fleet/login_throttle.py); then that address is refused that username until it ends.
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 10, minimum=1)
LOGIN_FAILURE_WINDOW_S = env_int("LOGIN_FAILURE_WINDOW_S", 300, minimum=1)
#: Failures from one address over any usernames, and against one username from anywhere
#: (the latter refuses only addresses that failed themselves; fleet/login_throttle.py).
LOGIN_IP_FAILURE_LIMIT = env_int("LOGIN_IP_FAILURE_LIMIT", 30, minimum=1)
LOGIN_USER_FAILURE_LIMIT = env_int("LOGIN_USER_FAILURE_LIMIT", 100, minimum=1)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet:host_list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # No manifest: templates render without a prior collectstatic (tests, demo).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

#: True only when a reverse proxy we run (compose's Caddy, an Ingress) is the sole way in:
#: then its X-Forwarded-Proto and X-Real-IP headers are trusted. Never with gunicorn exposed.
BEHIND_PROXY = env_bool("BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
#: An https SITE_URL means TLS in front (compose's Caddy): secure cookies, HSTS (one year,
#: check --deploy's W004/W005/W021) and a redirect of plain http to https (W008). The
#: health check that compose runs over plain http inside the container is exempt.
HTTPS = SITE_URL.startswith("https://")
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
#: fleet/middleware.py sends it on every response: same-origin scripts, styles and images
#: only, no inline script or style attribute, no framing, forms post to this site.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                           "img-src 'self' data:; font-src 'self'; connect-src 'self'; "
                           "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                           "form-action 'self'")

# Caches back the ingest rate limiter: shared Redis in production, per-process otherwise.
if REDIS_URL:
    # Timeouts: a Redis that stops answering must not hang ingest requests.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL, "KEY_PREFIX": "fleet",
                          "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- ingest -----------------------------------------------------------------
#: Raw reports older than this are pruned unless kept (version/flags/template/GPU change).
REPORT_RETENTION_HOURS = env_int("REPORT_RETENTION_HOURS", 48, minimum=1)
# Derived, evaluated, unchanged raw reports older than this are deleted by prune_reports
# (their numbers live on in the samples; changed ones and each server's newest stay).
REPORT_RAW_RETENTION_MINUTES = env_int("REPORT_RAW_RETENTION_MINUTES", 30, minimum=1)
# Metric and GPU samples older than this are thinned to one per server/GPU per hour
# (<= 5 MB per host per 30 days; bench/storage.py).
SAMPLE_FULL_RESOLUTION_HOURS = env_int("SAMPLE_FULL_RESOLUTION_HOURS", 6, minimum=1)
# Metric and GPU samples older than this many days go: whole daily partitions are dropped on
# PostgreSQL (fleet/partitions.py), rows deleted on SQLite (sized for 30 days).
SAMPLE_RETENTION_DAYS = env_int("SAMPLE_RETENTION_DAYS", 30, minimum=1)
#: Sustained per-token rate: (reports, per seconds). Default 1 report / 5 s.
INGEST_RATE = env_rate("INGEST_RATE", "1/5s")
#: Reports a token may send back to back before the sustained rate applies (spool replay).
INGEST_BURST = env_int("INGEST_BURST", 10, minimum=1)
#: Seconds an agent is told to wait (Retry-After) when the database is unreachable.
INGEST_RETRY_AFTER_S = 30
#: Seconds a web worker may reuse a live token's lookup (fleet.token_cache). A
#: revocation through the models is seen at the next request (shared epoch in Redis); this
#: bounds changes that bypass them (QuerySet.update, SQL by hand). 0 turns the cache off.
INGEST_TOKEN_CACHE_S = env_int("INGEST_TOKEN_CACHE_S", 300, minimum=0)
#: How far ahead of this server's clock a report's collected_at may be (seconds): clock skew
#: between nodes is tolerated, a 2099 timestamp that would hide every later report is not.
COLLECTED_AT_MAX_AHEAD_S = env_int("COLLECTED_AT_MAX_AHEAD_S", 300, minimum=0)
#: How far behind this server's clock a report's collected_at may be (days): a spooled report
#: of a node that was offline for months is still history, ``0001-01-01`` is not (date
#: arithmetic on it overflows in evaluation). One year by default.
COLLECTED_AT_MAX_AGE_DAYS = env_int("COLLECTED_AT_MAX_AGE_DAYS", 366, minimum=1)
# Seconds between raw /metrics texts the dashboard asks each host for (``metrics_text`` in
# the 202; fleet.metrics_text); 0 leaves it to the agents' own schedule (metrics_text_every).
FLEET_METRICS_TEXT_EVERY_S = env_int("FLEET_METRICS_TEXT_EVERY_S", 0, minimum=0)

# --- enrollment ---------------------------------------------------
#: Enrollment attempts per client IP and per secret: (requests, per seconds), and burst.
ENROLL_RATE = env_rate("ENROLL_RATE", "10/60s")
ENROLL_BURST = env_int("ENROLL_BURST", 5, minimum=1)
#: Defaults of a new enrollment secret: how many machines it may enroll, and for how long.
ENROLL_SECRET_MAX_USES = env_int("ENROLL_SECRET_MAX_USES", 1, minimum=1)
ENROLL_SECRET_TTL_H = env_int("ENROLL_SECRET_TTL_H", 24, minimum=1)

# --- Celery (cookiecutter-django shape: JSON only, time limits, named queues) -------
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
# Without a broker (the embedded demo) tasks run in-process right after commit.
CELERY_TASK_ALWAYS_EAGER = REDIS_URL is None
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 3
# An unacked task is redelivered after this; retry countdowns must stay below it.
CELERY_VISIBILITY_TIMEOUT_MINUTES = env_int("CELERY_VISIBILITY_TIMEOUT_MINUTES", 10, minimum=1)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_MINUTES * 60}
# Publishing gives up quickly so ingest can answer 202 while the broker is down.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0,
                                    "interval_step": 0.2, "interval_max": 0.5}
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "audit.tasks.evaluate_report": {"queue": "evaluate"},
    "alerts.*": {"queue": "alerts"},
    "audit.tasks.send_*": {"queue": "alerts"},
}
# Host shards of the evaluation queue (docs/scaling.md): with N > 1 a host's reports go to
# queue ``evaluate.<host id mod N>`` so that one worker (concurrency 1) per shard applies
# them in order; 1 keeps the single ``evaluate`` queue.
EVALUATE_SHARDS = env_int("EVALUATE_SHARDS", 1, minimum=1)
# Only tasks that claim their rows (safe to run twice) set acks_late themselves.
CELERY_TASK_ACKS_LATE = False
CELERY_BEAT_SCHEDULE = {
    "sweep-unevaluated-reports": {"task": "fleet.tasks.sweep_unevaluated", "schedule": 60.0},
    "prune-reports": {"task": "fleet.tasks.prune_reports", "schedule": 3600.0},
    # Derived raw reports go every 5 minutes: 100,000 a run at 10,000 hosts, not 1.2 million.
    "prune-derived-raw": {"task": "fleet.tasks.prune_derived_raw", "schedule": 300.0},
    "maintain-sample-partitions": {"task": "fleet.tasks.maintain_sample_partitions",
                                   "schedule": 3600.0},
    "check-knowledge-base": {"task": "audit.tasks.check_knowledge_base", "schedule": 60.0},
    "alerts-sweep": {"task": "alerts.sweep", "schedule": 60.0},
    "alerts-silent-hosts": {"task": "alerts.check_silent_hosts", "schedule": 60.0},
}

# --- alerts -------------------------------------------------------------------
#: Webhook/Slack URLs on private or loopback addresses are refused unless true (SSRF).
ALERTS_ALLOW_PRIVATE_WEBHOOKS = env_bool("ALERTS_ALLOW_PRIVATE_WEBHOOKS", False)
#: Events of one trigger within this many seconds go out as one message per channel.
ALERT_GROUP_WINDOW_S = env_int("ALERT_GROUP_WINDOW_S", 60, minimum=1)
#: Repeats of the same (host, rule) on a channel are held back for this long.
ALERT_THROTTLE_S = env_int("ALERT_THROTTLE_S", 3600, minimum=0)
#: A host is "silent" after this many missed agent intervals.
ALERT_HOST_SILENT_INTERVALS = env_int("ALERT_HOST_SILENT_INTERVALS", 5, minimum=1)
ALERT_HTTP_TIMEOUT_S = env_int("ALERT_HTTP_TIMEOUT_S", 10, minimum=1)
ALERT_SMTP_TIMEOUT_S = env_int("ALERT_SMTP_TIMEOUT_S", 10, minimum=1)
ALERT_MAX_ATTEMPTS = env_int("ALERT_MAX_ATTEMPTS", 8, minimum=1)
ALERT_RETRY_BASE_S = env_int("ALERT_RETRY_BASE_S", 10, minimum=1)
#: Retry delays stay at or below half the broker visibility timeout (Celery's docs).
ALERT_RETRY_MAX_S = min(env_int("ALERT_RETRY_MAX_S", 300, minimum=1),
                        CELERY_VISIBILITY_TIMEOUT_MINUTES * 30)
#: A claimed delivery is taken over after this (above the send task's 90 s time limit).
ALERT_CLAIM_LEASE_S = env_int("ALERT_CLAIM_LEASE_S", 120, minimum=91)
#: Alertmanager channels re-post their open alerts this often (seconds), each with endsAt
#: 4 intervals ahead (alerts.alertmanager_sync; Prometheus' own resend delay is 1 minute).
ALERTMANAGER_RESEND_S = env_int("ALERTMANAGER_RESEND_S", 60, minimum=1)
#: Life of an Alertmanager channel's test alert (seconds); it then resolves itself.
ALERTMANAGER_TEST_ALERT_S = env_int("ALERTMANAGER_TEST_ALERT_S", 300, minimum=1)
#: Host labels copied onto alerts and Prometheus series (bounded: only these keys).
FLEET_EXPORTED_HOST_LABELS = env_list("FLEET_EXPORTED_HOST_LABELS", ["env", "team"])
for _name in FLEET_EXPORTED_HOST_LABELS:  # Prometheus' label-name syntax, reserved __ excluded
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", _name) or _name.startswith("__"):
        raise ImproperlyConfigured(f"FLEET_EXPORTED_HOST_LABELS: {_name!r} is not a label name")
CELERY_BEAT_SCHEDULE["alerts-alertmanager-sync"] = {"task": "alerts.sync_alertmanager",
                                                    "schedule": float(ALERTMANAGER_RESEND_S)}

# Email through Django's framework; the demo uses the file backend under var/mail.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = ALERT_SMTP_TIMEOUT_S
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "fleet-audit@localhost")

# --- audit --------------------------------------------------------------------
#: Rule files (YAML); default audit/rules. Edited files are picked up without a restart.
AUDIT_RULES_DIR = env_str("AUDIT_RULES_DIR")
#: Metric rules run at most this often per server (every 5 minutes).
AUDIT_METRICS_INTERVAL_S = env_int("AUDIT_METRICS_INTERVAL_S", 300, minimum=0)
#: Each host's metric rules fall due at its own phase of that interval (audit.cadence), so
#: hosts that came up together do not all fall due in the same minute. False: the interval
#: counts from each server's last metric evaluation.
AUDIT_METRICS_SPREAD = env_bool("AUDIT_METRICS_SPREAD", True)
#: A finding presumed still firing (its rule not due) has its last_seen refreshed once it is
#: this many seconds old, not on every report (audit.steady; 0: every report).
AUDIT_FINDING_SEEN_REFRESH_S = env_int("AUDIT_FINDING_SEEN_REFRESH_S", 300, minimum=0)
#: Reports that change nothing but metrics and GPU readings are applied in the request and
#: not queued (fleet.lane; PostgreSQL only). False: every report goes through the worker.
INGEST_STEADY_LANE = env_bool("INGEST_STEADY_LANE", True)
#: A slot that restarted this many times within the window is a crash loop.
AUDIT_CRASH_LOOP_RESTARTS = env_int("AUDIT_CRASH_LOOP_RESTARTS", 3, minimum=1)
AUDIT_CRASH_LOOP_WINDOW_S = env_int("AUDIT_CRASH_LOOP_WINDOW_S", 600, minimum=60)

# --- knowledge-base bundles (manage.py kb_update; audit/kb/bundle.py) ------------
#: State dir of installed bundles (``bundles/<hash>/``, ``current`` symlink). Web, worker and
#: beat must share it (one volume in Compose), as they share the database.
AUDIT_KB_DIR = env_str("AUDIT_KB_DIR", str(VAR_DIR / "kb"))
#: Base64 raw Ed25519 public keys (comma separated) whose bundles kb_update accepts.
AUDIT_KB_PUBLIC_KEYS = env_list("AUDIT_KB_PUBLIC_KEYS", [])
#: A downloaded bundle larger than this is refused (the built-in KB is well under 5 MiB).
AUDIT_KB_MAX_BUNDLE_BYTES = env_int("AUDIT_KB_MAX_BUNDLE_BYTES", 64 * 2**20, minimum=1024)
AUDIT_KB_DOWNLOAD_TIMEOUT_S = env_int("AUDIT_KB_DOWNLOAD_TIMEOUT_S", 30, minimum=1)
#: kb_update accepts http:// only for loopback hosts when true (tests); https otherwise.
AUDIT_KB_ALLOW_HTTP_LOOPBACK = env_bool("AUDIT_KB_ALLOW_HTTP_LOOPBACK", False)
#: The active KB older than this many days raises the fleet-level "KB stale" banner/alert.
AUDIT_KB_MAX_AGE_DAYS = env_int("AUDIT_KB_MAX_AGE_DAYS", 30, minimum=1)

# --- upstream watch (audit/upstream.py): opt-in, reads GitHub's REST API ------------
AUDIT_UPSTREAM_WATCH = env_bool("AUDIT_UPSTREAM_WATCH", False)
AUDIT_UPSTREAM_API_URL = env_str("AUDIT_UPSTREAM_API_URL", "https://api.github.com")
AUDIT_UPSTREAM_INTERVAL_S = env_int("AUDIT_UPSTREAM_INTERVAL_S", 6 * 3600, minimum=60)
AUDIT_UPSTREAM_TIMEOUT_S = env_int("AUDIT_UPSTREAM_TIMEOUT_S", 10, minimum=1)
#: Optional; raises GitHub's rate limit from 60 to 5000 requests an hour.
GITHUB_TOKEN = env_str("GITHUB_TOKEN")
CELERY_BEAT_SCHEDULE["check-kb-freshness"] = {
    "task": "audit.tasks.check_kb_freshness", "schedule": 3600.0}
if AUDIT_UPSTREAM_WATCH:
    CELERY_BEAT_SCHEDULE["watch-upstream"] = {
        "task": "audit.tasks.watch_upstream", "schedule": float(AUDIT_UPSTREAM_INTERVAL_S)}

# --- Prometheus scrape of the dashboard (front/prometheus.py) ---------------
#: Bearer token Prometheus sends to /metrics; unset: /metrics answers 404.
PROMETHEUS_TOKEN = env_str("PROMETHEUS_TOKEN")

LOG_LEVEL = (env_str("LOG_LEVEL", "INFO") or "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(f"LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
                               f"got {LOG_LEVEL!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}

#: Every environment variable read above (tests compare compose and .env.example with it).
ENV_VARS_READ = tuple(_env_read)
