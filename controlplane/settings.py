"""Django settings: everything that differs between machines comes from the environment (docs/configuration.md)."""

from pathlib import Path

import dj_database_url

from apps.inventory.secret_keys import parse_fernet_keys

from .env import data_dir, env_bool, env_int, env_list, env_str, production
from .namespace import QUEUE_KINDS, namespace, queue_name, queue_names
from .tls import proxy_ssl_header

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = data_dir(BASE_DIR)
PRODUCTION = production()

SECRET_KEY = env_str("SECRET_KEY", "dev-only-insecure-key-change-me", required_in_production=True)
DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver"])
if PRODUCTION and not ALLOWED_HOSTS:
    from .env import MissingSetting

    raise MissingSetting("ALLOWED_HOSTS is required when PDCP_MODE=production (comma-separated host names)")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Fernet keys that encrypt secrets at rest, comma-separated: the first encrypts, all decrypt (docs/configuration.md "Rotating
# the secrets key"). A malformed key stops start-up here, naming PDCP_SECRETS_KEY.
SECRETS_KEYS = parse_fernet_keys(env_str("PDCP_SECRETS_KEY", "", required_in_production=True))
SECRETS_KEY_FILE = DATA_DIR / "secrets.key"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "apps.accounts",
    "apps.audit",
    "apps.inventory",
    "apps.jobs",
    "apps.deployments",
    "apps.telemetry",
    "apps.evals",
    "apps.ui",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.audit.middleware.AuditActorMiddleware",
    "apps.accounts.middleware.LoginRequiredEverywhereMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = "controlplane.wsgi.application"

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
                "apps.accounts.context_processors.role",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'controlplane.sqlite3'}", required_in_production=True),
        conn_max_age=60,
    )
}
# Web, worker and beat share the file: wait for the lock instead of failing at once. A transaction takes the write
# lock when it begins (IMMEDIATE): begun as a reader, it could not become a writer once another process had committed
# a write meanwhile, and failed at once with "database is locked" whatever the timeout (a deploy job did, under the
# telemetry rounds' writes).
SQLITE_OPTIONS = {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = dict(SQLITE_OPTIONS)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# Every Redis use (cache keys, channel groups, Celery queues and broker keys) is under this namespace, so two
# installations sharing a Redis stay apart; the default differs per database (controlplane/namespace.py).
PDCP_NAMESPACE = namespace(env_str("PDCP_NAMESPACE", ""), DATABASES["default"])
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A socket's receive blocks in BZPOPMIN for 5 s (channels_redis brpop_timeout); redis-py 8's default read
        # timeout is 5 s too, and when it fires first the consumer dies and the page's websocket closes. No read
        # timeout, as redis-py before 8 had: a longer one (15 s) left a cancelled receive looping in BZPOPMIN, so a
        # closed consumer's task never ended (tests/evals/pages/test_eval_consumer.py hung in teardown).
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}], "prefix": PDCP_NAMESPACE},
    }
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                "KEY_PREFIX": PDCP_NAMESPACE}
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": f"{PDCP_NAMESPACE}:"}  # kombu's own Redis keys too
# Queue name per kind of work; jobs pick theirs by job kind (apps/jobs/queues.py), periodic tasks by module.
PDCP_QUEUES = {kind: queue_name(PDCP_NAMESPACE, kind) for kind in QUEUE_KINDS}
CELERY_TASK_DEFAULT_QUEUE = PDCP_QUEUES["ssh"]
# A worker started without -Q consumes all of these; `manage.py celery_queues KIND` names one for -Q.
CELERY_TASK_QUEUES = {name: {"exchange": name, "routing_key": name} for name in queue_names(PDCP_NAMESPACE)}
CELERY_TASK_ROUTES = {
    "apps.jobs.tasks.sweep_orphaned_jobs_task": {"queue": PDCP_QUEUES["ssh"]},
    "apps.telemetry.tasks.*": {"queue": PDCP_QUEUES["telemetry"]},
    "apps.inventory.tasks.*": {"queue": PDCP_QUEUES["telemetry"]},
    "apps.evals.tasks.*": {"queue": PDCP_QUEUES["evals"]},
}
CELERY_BEAT_SCHEDULE = {
    "sweep-orphaned-jobs": {"task": "apps.jobs.tasks.sweep_orphaned_jobs_task", "schedule": 60.0},
    "scrape-live-state": {"task": "apps.telemetry.tasks.scrape_live_state_task", "schedule": 5.0,
                          "options": {"expires": 5.0}},  # a round older than the period is already stale
    "poll-npus": {"task": "apps.inventory.tasks.poll_npus_task", "schedule": 30.0, "options": {"expires": 30.0}},
    "history-rollup": {"task": "apps.telemetry.tasks.history_rollup_task", "schedule": 60.0,
                       "options": {"expires": 60.0}},
}
# History of the scrape rounds (apps/telemetry/history): how long each tier is kept before the rollup task
# deletes it. Raw points (one per round) in hours, 1-minute and 10-minute points in days.
PDCP_HISTORY_RAW_HOURS = env_int("PDCP_HISTORY_RAW_HOURS", 1, minimum=1)
PDCP_HISTORY_MINUTE_DAYS = env_int("PDCP_HISTORY_MINUTE_DAYS", 1, minimum=1)
PDCP_HISTORY_TEN_MINUTE_DAYS = env_int("PDCP_HISTORY_TEN_MINUTE_DAYS", 30, minimum=1)
# A running job whose worker has not beaten its heart for this long is marked failed by the sweep.
JOB_HEARTBEAT_TIMEOUT_SECONDS = int(env_str("JOB_HEARTBEAT_TIMEOUT_SECONDS", "60"))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Password logins: after this many failures per user name and address (or per address alone), that caller is
# locked out for the window (apps/accounts/login_throttle.py). 0 turns a limit off.
AUTHENTICATION_BACKENDS = ["apps.accounts.backends.ThrottledModelBackend"]
LOGIN_MAX_FAILURES = env_int("PDCP_LOGIN_MAX_FAILURES", 5)
LOGIN_MAX_FAILURES_PER_IP = env_int("PDCP_LOGIN_MAX_FAILURES_PER_IP", 50)
LOGIN_LOCKOUT_MINUTES = env_int("PDCP_LOGIN_LOCKOUT_MINUTES", 15, minimum=1)
# API tokens stop working this long after they were made (0 = never).
# AISBench evaluations (apps/evals): the separate venv `make aisbench` builds, the command on an AISBench client
# host's PATH, the simulated model's tokenizer directory, and where datasets, uploads and run folders live.
PDCP_AISBENCH = env_str("PDCP_AISBENCH", "/opt/pdcp-aisbench/bin/ais_bench")
PDCP_AISBENCH_REMOTE = env_str("PDCP_AISBENCH_REMOTE", "ais_bench")
PDCP_SIM_TOKENIZER = env_str("PDCP_SIM_TOKENIZER", "/opt/pdcp-aisbench/sim-tokenizer")
PDCP_EVALS_DIR = Path(env_str("PDCP_EVALS_DIR", str(DATA_DIR / "evals")))

API_TOKEN_TTL_HOURS = env_int("PDCP_TOKEN_TTL_HOURS", 720)
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(DATA_DIR / "staticfiles")))
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "apps.ui.staticfinders.PlotlyFinder",
]

# Development serves static files straight from the finders; production runs collectstatic.
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
# HTTPS only in production, behind the TLS-terminating proxy, which must set (overwrite) the header below.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(env_str("SECURE_PROXY_SSL_HEADER",
                                                   "X-Forwarded-Proto: https" if PRODUCTION else "none"))
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)  # a commitment to the browsers' list: opt in

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.accounts.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "controlplane.pagination.KnownQueryParams",  # first: an unknown query parameter is a 400 naming it
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "controlplane.pagination.Search",  # ?search= on views that name search_fields (names, any case)
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.accounts.api_errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "PD control plane API",
    "DESCRIPTION": "Inventory, topologies, jobs and evaluations for PD-disaggregated serving on Ascend clusters.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["apps.accounts.permissions.RolePermission"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "/static/favicon.svg",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"EvalStatusEnum": "apps.evals.choices.EvalStatus",  # jobs have a `status` too
                            "InstanceStateEnum": "apps.telemetry.models.InstanceState"},  # processes have a `state`
    # Every operation's 4xx/5xx answers are the one Error shape (apps/accounts/api_errors.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "apps.accounts.api_errors.add_error_responses"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"paramiko": {"level": "WARNING"}},
}
