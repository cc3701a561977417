"""Django settings, read from the environment with safe defaults.

Unset DATABASE_URL means an embedded SQLite file under SALVAGE_DATA_DIR (default ./var),
so the demo and the tests run on a machine with nothing but Python.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from recovery.fetch.allowlist import parse_networks
from recovery.ops.commandline import help_only

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def _without_password(parts: SplitResult) -> str:
    """A URL as it may be shown: any password replaced by ***."""
    if parts.password is None:
        return parts.geturl()
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


def database_from_url(url: str, data_dir: Path) -> dict:
    """Turn DATABASE_URL into a Django DATABASES entry (postgres:// or sqlite:///abs/path)."""
    if not url:
        return sqlite_database(data_dir / "salvage.sqlite3")
    parts = urlsplit(url)
    if parts.scheme in {"postgres", "postgresql"}:
        options = dict(parse_qsl(parts.query))
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Keep synchronous_commit on: "committed" must mean durable before we acknowledge.
            "OPTIONS": {"options": "-c synchronous_commit=on", **options},
            "CONN_MAX_AGE": env_int("SALVAGE_CONN_MAX_AGE", 60, minimum=0),
            "TEST": {"NAME": env_str("SALVAGE_TEST_DATABASE", "") or None},
        }
    if parts.scheme == "sqlite":
        if parts.netloc:
            # sqlite://var/db would otherwise silently become /db (the "var" is a host part).
            # Named without its password: the message reaches terminals and logs.
            raise ImproperlyConfigured(
                f"DATABASE_URL {_without_password(parts)!r}: use sqlite:///absolute/path "
                "(three slashes)"
            )
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ImproperlyConfigured("DATABASE_URL sqlite:/// needs an absolute path")
        return sqlite_database(Path(path))
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parts.scheme!r} is not supported")


def sqlite_database(path: Path) -> dict:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file is in the way" if path.parent.is_file() else exc.strerror
        raise ImproperlyConfigured(
            f"data directory {path.parent}: cannot create it ({why}); "
            "set SALVAGE_DATA_DIR (or the demo's --data-dir) to a directory you can write"
        ) from None
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy
            # timeout instead of deadlocking on lock upgrade. WAL lets readers run beside the
            # writer; synchronous=FULL makes each COMMIT durable (NORMAL can lose the last
            # commits on power loss, which would break "commit before acknowledge").
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=FULL;",
        },
        # Worker processes must see the test database, so it is a file, not :memory:.
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    # `manage.py help`, `manage.py COMMAND --help` and `--version` print usage and serve
    # nothing: they need no key (read from the command line, never from the environment).
    if help_only(sys.argv):
        SECRET_KEY = "help-only-no-key-needed"
    elif not DEBUG and not env_bool("SALVAGE_INSECURE_DEV_KEY", False):
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off "
            "(the demo and tests set DEBUG=1 or SALVAGE_INSECURE_DEV_KEY=1)"
        )
    else:
        SECRET_KEY = "insecure-dev-key-not-for-production"

DATA_DIR = Path(env_str("SALVAGE_DATA_DIR", str(BASE_DIR / "var"))).resolve()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    # recovery before django_q: its `qcluster` command (django-q2's, plus a heartbeat) wins.
    "recovery",
    "django_q",
    "dashboard",
    # The pull API (api/, docs/api.md): Django REST framework, its OpenAPI document, and the
    # engine's API tokens and change feed (their own app: recovery/consumers/).
    "rest_framework",
    "drf_spectacular",
    "recovery.consumers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # The viewer's time zone for the page (a user setting; UTC until set).
    "dashboard.viewer_zone.ViewerTimeZoneMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A strict Content-Security-Policy header on every page (no inline script).
    "dashboard.middleware.ContentSecurityPolicyMiddleware",
    # A page that meets a database outage answers a styled 503, one log line per outage.
    "dashboard.middleware.DatabaseOutageMiddleware",
    # An empty 405 (require_POST refusing a GET) answers the styled 405 page.
    "dashboard.middleware.MethodNotAllowedPageMiddleware",
    # A NUL in a query parameter is a 400 before any query (PostgreSQL refuses NUL in text).
    "dashboard.middleware.RefuseNulMiddleware",
]

ROOT_URLCONF = "recovery.urls"
WSGI_APPLICATION = "recovery.wsgi.application"

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

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"), DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("SALVAGE_STATIC_ROOT", str(DATA_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"  # each role's first page (dashboard.views.home)
LOGOUT_REDIRECT_URL = "login"

# Cookies and transport security outside DEBUG (manage.py check --deploy must pass).
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
# Dashboard sessions last a working day, not Django's default two weeks.
SESSION_COOKIE_AGE = env_int("SALVAGE_SESSION_SECONDS", 8 * 3600, minimum=60)
# The demo serves plain http on loopback, where Secure cookies would never come back.
if not env_bool("SALVAGE_SECURE_COOKIES", True):
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("SALVAGE_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# A shared cache: login throttling and qinfo both need one that every process sees.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "salvage_cache",
    }
}

# plain: "time level logger message" lines; json: one JSON object per line (recovery.ops.logs).
SALVAGE_LOG_FORMAT = env_str("SALVAGE_LOG_FORMAT", "plain").strip().lower()
if SALVAGE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"SALVAGE_LOG_FORMAT={SALVAGE_LOG_FORMAT!r}: expected plain or json")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact": {"()": "recovery.ops.logs.RedactSecretsFilter"},
        # django-q2's per-poll outage tracebacks; our guard logs one line per state change.
        "quiet_outage": {"()": "recovery.ops.outage.QuietOutageFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "recovery.ops.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": SALVAGE_LOG_FORMAT,
            "filters": ["redact"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("SALVAGE_LOG_LEVEL", "INFO")},
    "loggers": {
        # django-q2 logs as "django-q" (not its package name): a line per task and wake-up
        # at INFO; its per-poll outage tracebacks are dropped (our guard logs one line).
        "django-q": {
            "level": env_str("SALVAGE_Q_LOG_LEVEL", "WARNING"),
            "filters": ["quiet_outage"],
        },
        # A dashboard page that met a database outage answers 503 (dashboard.middleware,
        # one line per outage); any other request failing for it logs no traceback per request.
        "django.request": {"filters": ["quiet_outage"]},
        # httpx logs every request at INFO: thousands of lines per run, URLs included.
        "httpx": {"level": "WARNING"},
    },
}

# --- Salvage product knobs -----------------------------------------------------------------
SALVAGE_LEASE_SECONDS = env_int("SALVAGE_LEASE_SECONDS", 300, minimum=1)
SALVAGE_CLAIM_BATCH = env_int("SALVAGE_CLAIM_BATCH", 50, minimum=1)
# The claim and commit run as server-side prepared statements on PostgreSQL (planned once per
# connection). Off for a pooler that cannot carry them across transactions: PgBouncer in
# transaction mode before 1.21, or without max_prepared_statements.
SALVAGE_PG_PREPARE = env_bool("SALVAGE_PG_PREPARE", True)
SALVAGE_CONCURRENCY = env_int("SALVAGE_CONCURRENCY", 16, minimum=1)
# `manage.py work` on PostgreSQL commits batch N on a second connection while it claims and
# runs batch N+1 (recovery.commit_lane). Off: one batch at a time, as a django-q2 wake-up does.
SALVAGE_PIPELINE_COMMITS = env_bool("SALVAGE_PIPELINE_COMMITS", True)
SALVAGE_BACKOFF_BASE = env_float("SALVAGE_BACKOFF_BASE", 1.0, minimum=0.0)
SALVAGE_BACKOFF_CAP = env_float("SALVAGE_BACKOFF_CAP", 300.0, minimum=0.0)
SALVAGE_RETRY_AFTER_CAP = env_int("SALVAGE_RETRY_AFTER_CAP", 3600, minimum=1)
# Attempts of one task lost with their worker (SIGKILL, OOM, a lease expired under a stall)
# do not use its retry budget; this many quarantine it as worker_crash_loop (a poison page).
SALVAGE_CRASH_BUDGET = env_int("SALVAGE_CRASH_BUDGET", 10, minimum=1)
# Database outages (recovery.ops.outage): the loops wait with backoff capped at SALVAGE_DB_RETRY_CAP
# and exit (status 1, one line) once the database has been unreachable this many seconds. The
# same limit and cap hold for the Redis broker (REDIS_URL) in qcluster and dispatch.
SALVAGE_DB_OUTAGE_LIMIT = env_float("SALVAGE_DB_OUTAGE_LIMIT", 600.0, minimum=1.0)
SALVAGE_DB_RETRY_CAP = env_float("SALVAGE_DB_RETRY_CAP", 30.0, minimum=0.1)
# Networks a target may resolve to although they are private (CIDRs, comma separated).
SALVAGE_ALLOWED_NETWORKS = env_list("SALVAGE_ALLOWED_NETWORKS")
try:  # refused at start-up: a typo here would otherwise fail (quarantine) every fetch
    parse_networks(SALVAGE_ALLOWED_NETWORKS)
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
SALVAGE_USER_AGENT = env_str("SALVAGE_USER_AGENT", "Salvage/0.1 (+https://example.invalid/bot)")
SALVAGE_MAX_RESPONSE_BYTES = env_int("SALVAGE_MAX_RESPONSE_BYTES", 5_000_000, minimum=1024)
SALVAGE_REQUEST_DEADLINE = env_float("SALVAGE_REQUEST_DEADLINE", 30.0, minimum=0.1)
# Politeness every worker shares (recovery.fetch.hostslots): a host with a spacing (Crawl-delay,
# min_delay, a 429's slow-down) gives its turns from one database row; a page whose turn is
# further away than SALVAGE_POLITENESS_WAIT seconds is deferred (not slept on, not counted).
SALVAGE_SHARED_POLITENESS = env_bool("SALVAGE_SHARED_POLITENESS", True)
SALVAGE_POLITENESS_WAIT = env_float("SALVAGE_POLITENESS_WAIT", 1.0, minimum=0.0)
# An unreachable robots.txt (5xx, 429, network; recovery.fetch.robots): its host's pages are
# deferred while it is retried after base * 2^(n-1) seconds (capped; a Retry-After is honoured),
# and end as robots_unreachable once it stayed unreachable this long (RFC 9309 2.3.1.3).
SALVAGE_ROBOTS_RETRY_BASE = env_float("SALVAGE_ROBOTS_RETRY_BASE", 30.0, minimum=0.01)
SALVAGE_ROBOTS_RETRY_CAP = env_float("SALVAGE_ROBOTS_RETRY_CAP", 3600.0, minimum=0.01)
SALVAGE_ROBOTS_UNREACHABLE_LIMIT = env_float(
    "SALVAGE_ROBOTS_UNREACHABLE_LIMIT", 86400.0, minimum=1.0
)
SALVAGE_ARTEFACT_DIR = Path(env_str("SALVAGE_ARTEFACT_DIR", str(DATA_DIR / "artefacts")))
# The page archive (recovery.archive): every 2xx page the direct provider fetched, gzipped and
# named by content under SALVAGE_ARTEFACT_DIR/archive, so a recovery batch can re-extract it
# without a request. A body over the per-page cap is not kept; a blob expires after the days;
# `pruneartefacts` removes expired blobs, then the oldest beyond the total (compressed bytes).
SALVAGE_ARCHIVE_PAGES = env_bool("SALVAGE_ARCHIVE_PAGES", True)
SALVAGE_ARCHIVE_MAX_PAGE_BYTES = env_int("SALVAGE_ARCHIVE_MAX_PAGE_BYTES", 2_000_000, minimum=0)
SALVAGE_ARCHIVE_MAX_BYTES = env_int("SALVAGE_ARCHIVE_MAX_BYTES", 20_000_000_000, minimum=0)
SALVAGE_ARCHIVE_DAYS = env_float("SALVAGE_ARCHIVE_DAYS", 30.0, minimum=0.0)
# The browser provider (recovery.providers.browser): Debian's Chromium, and the cap on a
# failed page's screenshot kept for triage.
SALVAGE_CHROMIUM = env_str("SALVAGE_CHROMIUM", "/usr/bin/chromium")
SALVAGE_SCREENSHOT_MAX_BYTES = env_int("SALVAGE_SCREENSHOT_MAX_BYTES", 1_000_000, minimum=1024)
# Set by `manage.py demo` for its web server: the home page is the demo's checklist.
SALVAGE_DEMO = env_bool("SALVAGE_DEMO", False)
SALVAGE_EXPORT_DIR = Path(env_str("SALVAGE_EXPORT_DIR", str(DATA_DIR / "exports")))
# Outbox destination: "file:///abs/dir" (default) or an http(s) endpoint.
SALVAGE_DESTINATION = env_str("SALVAGE_DESTINATION", "")
# Outbox delivery (recovery.delivery.outbox): per-request timeout, how long a sender holds an event,
# full-jitter backoff base/cap, and whether an acceptance enqueues a django-q2 wake-up.
SALVAGE_DELIVERY_TIMEOUT = float(env_str("SALVAGE_DELIVERY_TIMEOUT", "10"))
SALVAGE_DELIVERY_LEASE_SECONDS = env_int("SALVAGE_DELIVERY_LEASE_SECONDS", 60, minimum=1)
SALVAGE_DELIVERY_BACKOFF_BASE = float(env_str("SALVAGE_DELIVERY_BACKOFF_BASE", "2"))
SALVAGE_DELIVERY_BACKOFF_CAP = float(env_str("SALVAGE_DELIVERY_BACKOFF_CAP", "600"))
SALVAGE_OUTBOX_WAKE = env_bool("SALVAGE_OUTBOX_WAKE", True)
# Acceptance hooks (recovery.quality.acceptance_steps): how often a worker advances runs while busy,
# and the least time between two outbox sweeps sent by the dispatcher.
SALVAGE_ADVANCE_SECONDS = float(env_str("SALVAGE_ADVANCE_SECONDS", "1"))
SALVAGE_OUTBOX_SWEEP_SECONDS = float(env_str("SALVAGE_OUTBOX_SWEEP_SECONDS", "5"))
# Fault injection for crash tests: names a point where the process SIGKILLs itself.
# Read only by recovery.faults, which is inert unless this is set.
SALVAGE_FAULT_POINT = env_str("SALVAGE_FAULT_POINT")
# Dispatcher (recovery.dispatch): tick length, the most wake-ups left waiting in the queue at
# once, and how often busy runs' counter deltas are folded.
SALVAGE_DISPATCH_TICK = env_float("SALVAGE_DISPATCH_TICK", 0.5, minimum=0.05)
# How often the dispatcher looks for schedules whose window is due (recovery.intake.schedules).
SALVAGE_SCHEDULE_CHECK_SECONDS = env_float("SALVAGE_SCHEDULE_CHECK_SECONDS", 10.0, minimum=0.05)
# The directory a schedule's manifest file must be in when an admin names it in the browser
# (the command line may name any file: its user can read them anyway).
SALVAGE_SCHEDULE_MANIFEST_DIR = Path(
    env_str("SALVAGE_SCHEDULE_MANIFEST_DIR", str(DATA_DIR / "manifests"))
).resolve()
SALVAGE_DISPATCH_MAX_WAITING = env_int("SALVAGE_DISPATCH_MAX_WAITING", 8, minimum=1)
SALVAGE_COMPACT_SECONDS = env_float("SALVAGE_COMPACT_SECONDS", 10.0, minimum=0.5)
# Worker liveness (recovery.ops.liveness): every process beats every HEARTBEAT seconds, busy or
# idle; not seen for ALIVE seconds is "stale", for GONE seconds "gone".
SALVAGE_HEARTBEAT_SECONDS = env_float("SALVAGE_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
SALVAGE_WORKER_ALIVE_SECONDS = env_float("SALVAGE_WORKER_ALIVE_SECONDS", 30.0, minimum=0.2)
SALVAGE_WORKER_GONE_SECONDS = env_float("SALVAGE_WORKER_GONE_SECONDS", 600.0, minimum=0.3)
if not SALVAGE_HEARTBEAT_SECONDS < SALVAGE_WORKER_ALIVE_SECONDS < SALVAGE_WORKER_GONE_SECONDS:
    raise ImproperlyConfigured(
        "need SALVAGE_HEARTBEAT_SECONDS < SALVAGE_WORKER_ALIVE_SECONDS < "
        "SALVAGE_WORKER_GONE_SECONDS (a live worker must never look stale)"
    )
# Dashboard uploads (dashboard.uploads): the largest spec and manifest an admin may upload;
# bigger manifests go through `manage.py createrun`.
SALVAGE_SPEC_UPLOAD_MAX_BYTES = env_int("SALVAGE_SPEC_UPLOAD_MAX_BYTES", 1_000_000, minimum=1024)
SALVAGE_MANIFEST_UPLOAD_MAX_BYTES = env_int(
    "SALVAGE_MANIFEST_UPLOAD_MAX_BYTES", 100_000_000, minimum=1024
)
# Confirming a new spec version posts the file again as base64 in a form field (4/3 of its
# size, dashboard.dataset_views), which Django holds to this limit (its default: 2.5 MB).
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, SALVAGE_SPEC_UPLOAD_MAX_BYTES * 4 // 3 + 65_536)
# When set, /metrics needs "Authorization: Bearer <token>" (Prometheus: bearer_token_file).
SALVAGE_METRICS_TOKEN = env_str("SALVAGE_METRICS_TOKEN")
# /metrics' per-run series (salvage_run_*{run,dataset}) cover the N most recent collecting runs:
# a bound on the series Prometheus stores, whatever the number of runs.
SALVAGE_METRICS_RUNS = env_int("SALVAGE_METRICS_RUNS", 20, minimum=1)

# Remote jobs (recovery.remote): how long a sender or poller holds a job before another worker
# may take it over, and how many failed status checks in a row send a job to the reconcile queue.
SALVAGE_REMOTE_LEASE_SECONDS = env_int("SALVAGE_REMOTE_LEASE_SECONDS", 60, minimum=1)
SALVAGE_REMOTE_POLL_FAILURES = env_int("SALVAGE_REMOTE_POLL_FAILURES", 10, minimum=1)

# Provider credentials come from the environment only; they never reach the database.
MESSORA_API_URL = env_str("MESSORA_API_URL", "https://api.messora.dev")
MESSORA_API_KEY = env_str("MESSORA_API_KEY")
TORNADO_API_URL = env_str("TORNADO_API_URL", "")
TORNADO_API_KEY = env_str("TORNADO_API_KEY")
WEBSCRAPER_API_URL = env_str("WEBSCRAPER_API_URL", "https://api.webscraper.io")
WEBSCRAPER_API_TOKEN = env_str("WEBSCRAPER_API_TOKEN")
WEBSCRAPER_WEBHOOK_SECRET = env_str("WEBSCRAPER_WEBHOOK_SECRET")

# --- django-q2 -----------------------------------------------------------------------------
# django-q2 only carries wake-ups; the lease table decides who works. It never retries on its
# own (ack_failures, max_attempts=1), and retry is far above timeout so a prefetched item is
# not redelivered while it waits (rule: retry > timeout * (1 + ceil((queue_limit+bulk)/workers))).
_Q_TIMEOUT = env_int("SALVAGE_Q_TIMEOUT", 300, minimum=5)
Q_CLUSTER = {
    "name": env_str("SALVAGE_Q_NAME", "salvage"),
    "workers": env_int("SALVAGE_Q_WORKERS", 2, minimum=1),
    "timeout": _Q_TIMEOUT,
    "retry": env_int("SALVAGE_Q_RETRY", _Q_TIMEOUT * 4, minimum=10),
    "queue_limit": env_int("SALVAGE_Q_WORKERS", 2, minimum=1),
    "bulk": 1,
    "poll": 0.2,
    "ack_failures": True,
    "max_attempts": 1,
    "save_limit": 100,
    "catch_up": False,
    "recycle": 500,
    "max_rss": 400_000,
    "label": "Queue",
}
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    # At-most-once broker: the dispatcher re-sends any wake-up that was never claimed.
    Q_CLUSTER["redis"] = REDIS_URL
    Q_CLUSTER["broker_class"] = "recovery.ops.qcluster_outage.RedisBroker"
else:
    Q_CLUSTER["orm"] = "default"
    Q_CLUSTER["broker_class"] = "recovery.ops.qcluster_outage.OrmBroker"

# --- the pull API (api/, docs/api.md) --------------------------------------------------------
# Requests per token (anonymous requests: per address); DRF's rate syntax, N/second|minute|
# hour|day.
SALVAGE_API_RATE = env_str("SALVAGE_API_RATE", "600/minute")
_count, _, _period = SALVAGE_API_RATE.partition("/")
if not (_count.isdigit() and int(_count) > 0 and _period in ("second", "minute", "hour", "day")):
    raise ImproperlyConfigured(
        f"SALVAGE_API_RATE={SALVAGE_API_RATE!r}: expected N/second, N/minute, N/hour or N/day"
    )
SALVAGE_API_TOKEN_MAX_DAYS = env_int("SALVAGE_API_TOKEN_MAX_DAYS", 365, minimum=1)
# Exports written once per content (ETag) for resumable downloads; removed when superseded or
# unused this long.
SALVAGE_EXPORT_CACHE_DIR = Path(env_str("SALVAGE_EXPORT_CACHE_DIR", str(DATA_DIR / "export-cache")))
SALVAGE_EXPORT_CACHE_SECONDS = env_int("SALVAGE_EXPORT_CACHE_SECONDS", 7 * 86400, minimum=60)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.auth.HasToken"],
    "DEFAULT_THROTTLE_CLASSES": ["api.auth.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "api.auth.JsonOnly",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Salvage pull API",
    "DESCRIPTION": "Accepted datasets, their runs, exports (CSV, JSONL, Parquet), rows and "
    "changes. Read-only; personal bearer tokens. See docs/api.md.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}
