"""The one way to push to browsers: emit(group, payload) over the channel layer, called after commit."""

import logging
import threading
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

# Per-group socket budget: what goes over the socket is throttled, never what is stored.
MAX_MESSAGES_PER_SECOND = 30
_budget_lock = threading.Lock()
_budget: dict[str, tuple[float, float]] = {}


def _allowed(group: str, now: float) -> bool:
    with _budget_lock:
        tokens, last = _budget.get(group, (MAX_MESSAGES_PER_SECOND, now))
        tokens = min(MAX_MESSAGES_PER_SECOND, tokens + (now - last) * MAX_MESSAGES_PER_SECOND)
        if tokens < 1:
            _budget[group] = (tokens, now)
            return False
        _budget[group] = (tokens - 1, now)
        return True


def emit(group: str, payload: dict, *, throttle: bool = False) -> bool:
    """Sends payload to every socket in group; returns False when throttled or the layer is down."""
    if throttle and not _allowed(group, time.monotonic()):
        return False
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.group_send)(group, {"type": "relay", "payload": payload})
    except Exception as exc:  # a dead Redis must never fail the job that emits
        logger.warning("emit to %s failed: %s", group, exc)
        return False
    return True
