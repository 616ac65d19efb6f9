"""POST /api/deployments/<id>/playground/: one playground request answered whole as JSON (text, figures, P and D)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api_errors import Conflict, invalid_response
from apps.accounts.permissions import RolePermission
from apps.accounts.roles import Role

from ..models import Deployment
from .request import KINDS, MAX_TOKENS_RANGE, TEMPERATURE_RANGE, PlaygroundInvalid
from .services import playground_run, playground_start
from .target import PlaygroundRefused


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(["system", "user", "assistant"])
    content = serializers.CharField()


class PlaygroundRequestSerializer(serializers.Serializer):
    """Documents the body; request.py checks it (the errors name the field)."""

    kind = serializers.ChoiceField(KINDS, default="chat")
    messages = MessageSerializer(many=True, required=False, help_text="chat: the conversation so far")
    prompt = serializers.CharField(required=False, help_text="completion: the prompt")
    max_tokens = serializers.IntegerField(min_value=MAX_TOKENS_RANGE[0], max_value=MAX_TOKENS_RANGE[1], default=128)
    temperature = serializers.FloatField(min_value=TEMPERATURE_RANGE[0], max_value=TEMPERATURE_RANGE[1], default=0.0)
    stream = serializers.BooleanField(default=True, help_text="ask the proxy to stream (timings per token)")


class ServedSerializer(serializers.Serializer):
    address = serializers.CharField(help_text="host:port as the proxy names it (X-PD-Prefill / X-PD-Decode)")
    key = serializers.CharField(help_text="the process key (p0-dp0); empty when no process serves there")
    instance = serializers.CharField()


class PlaygroundStatsSerializer(serializers.Serializer):
    ttft_ms = serializers.FloatField(allow_null=True)
    itl_p50_ms = serializers.FloatField(allow_null=True)
    itl_mean_ms = serializers.FloatField(allow_null=True)
    total_ms = serializers.FloatField(allow_null=True)
    chunks = serializers.IntegerField(allow_null=True)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
    finish_reason = serializers.CharField(allow_null=True)


class PlaygroundAnswerSerializer(serializers.Serializer):
    request_id = serializers.CharField()
    deployment = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField(help_text="ok | unreachable | timeout | http_4xx | http_5xx | stream_broken | garbled")
    http_status = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(help_text="why it failed; empty when ok")
    text = serializers.CharField()
    prefill = ServedSerializer(allow_null=True)
    decode = ServedSerializer(allow_null=True)
    retries = serializers.IntegerField(allow_null=True)
    stats = PlaygroundStatsSerializer()
    request = serializers.DictField(help_text="url, body, curl, python")
    raw_response = serializers.CharField()


class DeploymentPlaygroundView(APIView):
    permission_classes = [RolePermission]
    write_role = Role.OPERATOR

    @extend_schema(request=PlaygroundRequestSerializer, responses={
        200: OpenApiResponse(PlaygroundAnswerSerializer, description="the answer; `status` says whether the proxy "
                                                                     "served it (a failure at the proxy is 200 too)"),
        409: OpenApiResponse(description="the deployment is not running or has no proxy")},
        summary="Send one chat or completion through the deployment's proxy")
    def post(self, request, pk: int):
        deployment = get_object_or_404(Deployment, pk=pk)
        try:
            exchange = playground_start(deployment=deployment, user=request.user, data=request.data)
        except PlaygroundInvalid as exc:
            return invalid_response(exc.errors)
        except PlaygroundRefused as exc:
            raise Conflict(str(exc)) from None
        return Response(playground_run(exchange, deployment=deployment, user=request.user))
