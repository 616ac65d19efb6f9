"""Which life of the broker a job's message went to. Redis keeps its queues in memory: a Redis that restarted
without persistence (or lost its last writes) holds none of the messages queued before, and the pending jobs they
named would wait forever. Redis's run_id changes on every start, so a pending job queued on another run_id (or never
queued: the broker was down at commit) is sent again by the sweep (services.requeue_lost_jobs). Other brokers keep
their queues: they all count as one life, PERSISTENT. Redis is asked through Celery's own connection."""

import logging

from celery import current_app

logger = logging.getLogger(__name__)
PERSISTENT = "persistent"


def broker_run_id() -> str | None:
    """The broker's current run_id; PERSISTENT when it is not Redis, and None when it cannot be asked now."""
    try:
        with current_app.connection_for_write() as conn:
            if conn.transport_cls not in ("redis", "rediss"):
                return PERSISTENT
            conn.ensure_connection(max_retries=1)
            return conn.default_channel.client.info("server")["run_id"]
    except Exception as exc:  # kombu's OperationalError, redis's ConnectionError: the broker is away
        logger.warning("the broker cannot be asked for its run_id: %s", exc)
        return None
