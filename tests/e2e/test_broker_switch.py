"""The e2e fixtures point this process's Celery app at the e2e Redis database and back, once per live stack: the
second switch to the same URL must still send (it was handed the pool the first switch-back had closed)."""

import os

from tests.e2e.conftest import E2E_REDIS, use_broker


def test_a_second_switch_to_the_same_broker_still_sends():
    from controlplane.celery import app

    home = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        for _ in range(2):
            use_broker(app, E2E_REDIS)
            with app.producer_or_acquire() as producer:
                producer.connection.ensure_connection(max_retries=1)
                assert producer.connection.as_uri().endswith(E2E_REDIS.rsplit("/", 1)[1])
            use_broker(app, home)
    finally:
        use_broker(app, home)
