"""One namespace for everything an installation keeps in Redis: cache keys (live state, locks), channel groups,
Celery queues and the broker's own keys. Two installations sharing a Redis never see each other's state or run
each other's jobs (docs/configuration.md, PDCP_NAMESPACE)."""

import hashlib
import re
from pathlib import Path

from .env import MissingSetting

QUEUE_KINDS = ("ssh", "telemetry", "evals")
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def database_identity(database: dict) -> str:
    """The same string for every process that uses the same database: the SQLite file's absolute path, else
    engine, host, port and name."""
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:{Path(str(database['NAME'])).resolve()}"
    host = str(database.get("HOST") or "").lower()
    return f"{database['ENGINE']}|{host}|{database.get('PORT') or ''}|{database.get('NAME') or ''}"


def default_namespace(database: dict) -> str:
    return "pdcp-" + hashlib.sha256(database_identity(database).encode()).hexdigest()[:8]


def namespace(value: str, database: dict) -> str:
    """PDCP_NAMESPACE as set, or the default for this database."""
    if not value:
        return default_namespace(database)
    if not _VALID.fullmatch(value):
        raise MissingSetting(f"PDCP_NAMESPACE must be 1-64 letters, digits, '.', '_' or '-' (starting with a "
                             f"letter or digit), got {value!r}")
    return value


def queue_name(ns: str, kind: str) -> str:
    return f"{ns}.{kind}"


def queue_names(ns: str) -> list[str]:
    return [queue_name(ns, kind) for kind in QUEUE_KINDS]
