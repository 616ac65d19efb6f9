"""The five deployment jobs done process by process: the host runtime's job level (host.py), kept by a runtime that
only changes how one process is started, stopped or read. Each acts through the run's runtime (run.states, run.start,
run.stop, ...), never on a process directly."""

from .deploy import deploy
from .preflight import preflight
from .refresh import refresh
from .restart import restart
from .stop import stop

__all__ = ["deploy", "preflight", "refresh", "restart", "stop"]
