"""Websocket of one eval run: status, phase and progress pushed to the group `evalrun-<id>` (services.eval_emit).
Read-only: the run page subscribes, then reads the current state once over HTTP."""

from apps.realtime.object_socket import ObjectGroupConsumer

from .models import EvalRun


class EvalRunConsumer(ObjectGroupConsumer):
    model = EvalRun
    url_kwarg = "run_id"
    group_prefix = "evalrun"
