"""`make run`'s SQLite: two processes' transactions that read and then write both commit, one after the other,
instead of the second failing with "database is locked" (a deploy job did, beside the telemetry rounds)."""

import threading
import time

from django.db.backends.sqlite3.base import DatabaseWrapper

from controlplane.settings import SQLITE_OPTIONS


def wrapper(path: str, options: dict) -> DatabaseWrapper:
    return DatabaseWrapper({"NAME": path, "OPTIONS": dict(options), "TIME_ZONE": None, "CONN_MAX_AGE": 0,
                            "CONN_HEALTH_CHECKS": False, "AUTOCOMMIT": True, "ATOMIC_REQUESTS": False,
                            "USER": "", "PASSWORD": "", "HOST": "", "PORT": "", "TEST": {}})


def read_then_write_at_once(path: str, options: dict) -> list[str]:
    """Two connections each begin, read, wait, write and commit; returns the errors."""
    setup = wrapper(path, options)
    with setup.cursor() as c:
        c.execute("CREATE TABLE IF NOT EXISTS rounds (n INTEGER)")
    setup.close()
    errors = []

    def work():
        db = wrapper(path, options)
        try:
            db.ensure_connection()
            db._start_transaction_under_autocommit()  # what transaction.atomic does on SQLite
            with db.cursor() as c:
                c.execute("SELECT count(*) FROM rounds")
                time.sleep(0.3)
                c.execute("INSERT INTO rounds VALUES (1)")
            db.connection.commit()
        except Exception as exc:  # noqa: BLE001 - the error is what the test reports
            errors.append(str(exc))
        finally:
            db.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_two_read_then_write_transactions_both_commit(tmp_path, django_db_blocker):
    with django_db_blocker.unblock():  # a file of the test's own, not the test database
        errors = read_then_write_at_once(str(tmp_path / "cp.sqlite3"), SQLITE_OPTIONS)
    assert errors == []


def test_begun_as_readers_one_of_them_fails_at_once(tmp_path, django_db_blocker):
    """The trap the setting avoids, shown with SQLite's default (deferred) transactions."""
    deferred = {k: v for k, v in SQLITE_OPTIONS.items() if k != "transaction_mode"}
    t0 = time.monotonic()
    with django_db_blocker.unblock():
        errors = read_then_write_at_once(str(tmp_path / "cp.sqlite3"), deferred)
    assert errors == ["database is locked"]
    assert time.monotonic() - t0 < 5  # at once: waiting (the 20 s timeout) would not have helped
