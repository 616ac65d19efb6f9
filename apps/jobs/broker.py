"""Which life of the broker a job's message went to. Redis keeps its queues in memory: a Redis that restarted
without persistence (or lost its last writes) holds none of the messages queued before, and the pending jobs they
named would wait forever. Redis's run_id changes on every start, so a pending job queued on another run_id (or never
queued: the broker was down at commit) is sent again by the sweep (services.requeue_lost_jobs). Other brokers keep
their queues: they all count as one life, PERSISTENT."""

import logging
from urllib.parse import urlsplit

import redis
from django.conf import settings

logger = logging.getLogger(__name__)
PERSISTENT = "persistent"


def broker_run_id() -> str | None:
    """The broker's current run_id; PERSISTENT when it is not Redis, and None when it cannot be asked now."""
    url = settings.CELERY_BROKER_URL
    if urlsplit(url).scheme not in ("redis", "rediss"):
        return PERSISTENT
    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            return client.info("server")["run_id"]
        finally:
            client.close()
    except (redis.RedisError, OSError, KeyError) as exc:
        logger.warning("the broker cannot be asked for its run_id: %s", exc)
        return None
