"""GET /api/prometheus/sd/: Prometheus HTTP service discovery of every deployed metrics target (ecosystem/sd.py).

Prometheus reads a plain JSON list (no pagination envelope) and sends the API token with its `authorization`
block (type Token); a viewer's token is enough. docs/prometheus.md has the scrape config.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response

from apps.deployments.models import Process

from ..ecosystem.sd import sd_processes, sd_target_groups


class SdLabelsSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    deployment = serializers.CharField()
    revision = serializers.CharField(help_text="the revision number the process was started from ('' if unknown)")
    role = serializers.ChoiceField(choices=["prefill", "decode", "proxy", "kv_pool", "store"])
    instance = serializers.CharField(help_text="the PD instance (p0, d1), else the process key (proxy, kv-pool)")
    process = serializers.CharField(help_text="the process key, unique in the deployment (d0-dp1, store-0)")
    node = serializers.CharField()
    exporter = serializers.ChoiceField(choices=["none"], required=False,
                                       help_text="only on targets that serve no /metrics (memcached, MemCache)")
    __metrics_path__ = serializers.CharField(required=False, help_text="only where the page is not /metrics")


class SdTargetGroupSerializer(serializers.Serializer):
    targets = serializers.ListField(child=serializers.CharField(), help_text="one host:port")
    labels = SdLabelsSerializer()


class PrometheusSdView(generics.GenericAPIView):
    queryset = Process.objects.all()
    serializer_class = SdTargetGroupSerializer
    filter_backends = []
    pagination_class = None
    query_params = ("cluster", "deployment", "format")

    @extend_schema(operation_id="prometheus_sd_list", responses={200: SdTargetGroupSerializer(many=True)},
                   parameters=[OpenApiParameter("cluster", str, description="only this cluster (name)"),
                               OpenApiParameter("deployment", str, description="only this deployment (name)")])
    def get(self, request, format=None):
        """Every engine, proxy, Mooncake master and store server of every deployment's running processes, in
        Prometheus' http_sd_config format; a name that matches nothing gives an empty list."""
        unknown = sorted(set(request.query_params) - set(self.query_params))
        if unknown:
            raise serializers.ValidationError({name: ["unknown query parameter; known here: cluster, deployment"]
                                               for name in unknown})
        queryset = self.get_queryset()
        if cluster := request.query_params.get("cluster"):
            queryset = queryset.filter(deployment__cluster__name=cluster)
        if deployment := request.query_params.get("deployment"):
            queryset = queryset.filter(deployment__name=deployment)
        return Response(sd_target_groups(sd_processes(queryset)))
