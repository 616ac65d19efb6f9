"""The one way to push to browsers: emit(group, payload) over the channel layer, called after commit."""

import logging
import threading
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

# Per-group socket budget: what goes over the socket is throttled, never what is stored. Over budget, a message
# waits for the next token and a newer one to the same group replaces it: a burst loses its middle, never its end.
MAX_MESSAGES_PER_SECOND = 30
_budget_lock = threading.Lock()
_budget: dict[str, tuple[float, float]] = {}
_held: dict[str, dict] = {}  # group -> the newest payload waiting for a token


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
    """Sends payload to every socket in group; False when the layer is down, or when throttled: then it is sent
    once the budget allows, unless a newer payload to the group replaces it first."""
    if throttle and not _allowed(group, time.monotonic()):
        _hold(group, payload)
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


def _hold(group: str, payload: dict) -> None:
    with _budget_lock:
        waiting = group in _held
        _held[group] = payload
    if not waiting:
        timer = threading.Timer(1 / MAX_MESSAGES_PER_SECOND, _send_held, args=(group,))
        timer.daemon = True
        timer.start()


def _send_held(group: str) -> None:
    with _budget_lock:
        payload = _held.pop(group, None)
    if payload is not None:
        emit(group, payload, throttle=True)
