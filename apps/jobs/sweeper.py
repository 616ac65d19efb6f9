"""The sweep of orphaned jobs from inside every worker, so a job whose worker died ends failed even with beat down
and the dead worker never coming back on its host: each worker sweeps every sweep_seconds() (half the heartbeat
timeout, 1 to 60 s), so a silent job is failed at most 1.5 timeouts after its last heartbeat. Two sweepers racing
are harmless: the move to failed is a compare-and-swap (services.job_transition). Each round also queues again the
pending jobs whose message a restarted Redis lost (services.requeue_lost_jobs)."""

import logging
import threading

from django.conf import settings
from django.db import connections

from .services import requeue_lost_jobs, sweep_orphaned_jobs

logger = logging.getLogger(__name__)


def sweep_seconds() -> float:
    return min(60.0, max(1.0, settings.JOB_HEARTBEAT_TIMEOUT_SECONDS / 2))


class JobSweeper:
    """Runs sweep_orphaned_jobs from a daemon thread every sweep_seconds() until stop()."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pdcp-job-sweeper", daemon=True)

    def start(self) -> "JobSweeper":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(sweep_seconds()):
            try:
                sweep_orphaned_jobs()
                requeue_lost_jobs()
            except Exception as exc:  # the database away for a moment: the next round tries again
                logger.warning("sweep of orphaned jobs failed: %s", exc)
            finally:
                connections.close_all()  # this thread's connections only

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
