"""Inventory API: clusters, nodes (discover, host keys), NPUs, credentials, import/export."""

from django.db.models import Count, Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api_errors import BadGateway, invalid_response
from apps.accounts.roles import Role
from apps.jobs.api.responses import job_started
from apps.jobs.api.serializers import JobSerializer

from ..downloads import inventory_download
from ..inventory_file import InventoryFileInvalid
from ..models import Cluster, Node, Npu, SshCredential
from ..services import (
    HostKeyNotConfirmed,
    inventory_import,
    node_discover,
    node_fetch_host_key,
    node_pin_host_key,
)
from .filters import ClusterFilterSet, NodeFilterSet, NpuFilterSet
from .serializers import (
    ClusterSerializer,
    HostKeyPinSerializer,
    HostKeySerializer,
    InventoryFileErrorsSerializer,
    InventoryImportResultSerializer,
    InventoryImportSerializer,
    NodeSerializer,
    NpuSerializer,
    SshCredentialSerializer,
)


class ClusterViewSet(viewsets.ModelViewSet):
    queryset = Cluster.objects.annotate(node_count=Count("nodes")).order_by("name")
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilterSet
    search_fields = ["name", "description"]


class SshCredentialViewSet(viewsets.ModelViewSet):
    queryset = SshCredential.objects.all()
    serializer_class = SshCredentialSerializer
    filterset_fields = ["name", "username", "kind"]
    search_fields = ["name", "username"]


class NodeViewSet(viewsets.ModelViewSet):
    queryset = (Node.objects.select_related("cluster", "credential")
                .annotate(npu_total=Count("npus"), npu_unhealthy=Count("npus", filter=~Q(npus__health="OK")))
                .order_by("cluster__name", "name"))
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    search_fields = ["name", "address", "cluster__name"]
    role_for_action = {"discover": Role.OPERATOR, "fetch_host_key": Role.ADMIN, "pin_host_key": Role.ADMIN}

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def discover(self, request, pk=None, format=None):
        return job_started(node_discover(self.get_object(), user=request.user))

    @extend_schema(request=None, responses={200: HostKeySerializer, 502: OpenApiResponse(description="unreachable")})
    @action(detail=True, methods=["post"], url_path="fetch-host-key")
    def fetch_host_key(self, request, pk=None, format=None):
        from sshexec import SshError

        try:
            return Response(node_fetch_host_key(self.get_object()))
        except SshError as exc:
            raise BadGateway(str(exc)) from None

    @extend_schema(request=HostKeyPinSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"], url_path="pin-host-key")
    def pin_host_key(self, request, pk=None, format=None):
        data = HostKeyPinSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            node = node_pin_host_key(self.get_object(), **data.validated_data)
        except HostKeyNotConfirmed as exc:
            raise ValidationError({"fingerprint": [str(exc)]}) from None
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)


class NpuViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Npu.objects.select_related("node").order_by("node__cluster__name", "node__name", "logical_id")
    serializer_class = NpuSerializer
    filterset_class = NpuFilterSet
    search_fields = ["node__name", "node__cluster__name"]


class InventoryImportView(APIView):
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    @extend_schema(request=InventoryImportSerializer, responses={
        200: InventoryImportResultSerializer,
        400: OpenApiResponse(InventoryFileErrorsSerializer, description="the file is rejected and nothing changes: "
                                                                        "every error with its line and field")})
    def post(self, request):
        data = InventoryImportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data.get("file")
        try:
            text = upload.read().decode("utf-8") if upload else data.validated_data["text"]
        except UnicodeDecodeError:
            return invalid_response([{"field": "file", "message": "not UTF-8 text", "line": 0}])
        try:
            counts = inventory_import(text)
        except InventoryFileInvalid as exc:
            return invalid_response([{"field": e.field, "message": e.message, "line": e.line} for e in exc.errors],
                                    prefix="the inventory file is rejected, nothing changed: ")
        return Response(counts)


EXPORT_FORMATS = ("yaml", "csv")


class InventoryExportView(APIView):
    @extend_schema(parameters=[OpenApiParameter("as", str, enum=list(EXPORT_FORMATS),
                                                description="yaml (default): the whole inventory; csv: nodes only")],
                   responses={(200, "application/yaml"): OpenApiTypes.OBJECT, (200, "text/csv"): str})
    def get(self, request):
        unknown = sorted(set(request.query_params) - {"as"})
        if unknown:
            raise ValidationError({name: ["unknown query parameter; known here: as"] for name in unknown})
        wanted = request.query_params.get("as", "yaml")
        if wanted not in EXPORT_FORMATS:
            raise ValidationError({"as": [f"unknown export format {wanted!r}; choose {' or '.join(EXPORT_FORMATS)}"]})
        return inventory_download(wanted)
