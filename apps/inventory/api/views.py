"""Inventory API: clusters, nodes (discover, host keys), NPUs, credentials, import/export."""

from django.db.models import Count, Q
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import Role
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
from .filters import NodeFilterSet, NpuFilterSet
from .serializers import (
    ClusterSerializer,
    HostKeyPinSerializer,
    HostKeySerializer,
    InventoryImportResultSerializer,
    InventoryImportSerializer,
    NodeSerializer,
    NpuSerializer,
    SshCredentialSerializer,
)


class ClusterViewSet(viewsets.ModelViewSet):
    queryset = Cluster.objects.annotate(node_count=Count("nodes")).order_by("name")
    serializer_class = ClusterSerializer
    filterset_fields = ["name"]


class SshCredentialViewSet(viewsets.ModelViewSet):
    queryset = SshCredential.objects.all()
    serializer_class = SshCredentialSerializer
    filterset_fields = ["name", "username", "kind"]


class NodeViewSet(viewsets.ModelViewSet):
    queryset = (Node.objects.select_related("cluster", "credential")
                .annotate(npu_total=Count("npus"), npu_unhealthy=Count("npus", filter=~Q(npus__health="OK")))
                .order_by("cluster__name", "name"))
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    role_for_action = {"discover": Role.OPERATOR, "fetch_host_key": Role.ADMIN, "pin_host_key": Role.ADMIN}

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def discover(self, request, pk=None):
        job = node_discover(self.get_object(), user=request.user)
        return Response(JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: HostKeySerializer, 502: OpenApiResponse(description="unreachable")})
    @action(detail=True, methods=["post"], url_path="fetch-host-key")
    def fetch_host_key(self, request, pk=None):
        from sshexec import SshError

        try:
            return Response(node_fetch_host_key(self.get_object()))
        except SshError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_502_BAD_GATEWAY)

    @extend_schema(request=HostKeyPinSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"], url_path="pin-host-key")
    def pin_host_key(self, request, pk=None):
        data = HostKeyPinSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            node = node_pin_host_key(self.get_object(), **data.validated_data)
        except HostKeyNotConfirmed as exc:
            return Response({"fingerprint": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        return Response(NodeSerializer(self.get_queryset().get(pk=node.pk)).data)


class NpuViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Npu.objects.select_related("node").order_by("node__cluster__name", "node__name", "logical_id")
    serializer_class = NpuSerializer
    filterset_class = NpuFilterSet


class InventoryImportView(APIView):
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    @extend_schema(request=InventoryImportSerializer, responses={200: InventoryImportResultSerializer,
                                                                 400: OpenApiResponse(description="errors by line")})
    def post(self, request):
        data = InventoryImportSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data.get("file")
        try:
            text = upload.read().decode("utf-8") if upload else data.validated_data["text"]
        except UnicodeDecodeError:
            return Response({"errors": [{"line": 0, "field": "file", "message": "not UTF-8 text"}]}, status=400)
        try:
            counts = inventory_import(text)
        except InventoryFileInvalid as exc:
            return Response({"errors": [e.__dict__ for e in exc.errors]}, status=status.HTTP_400_BAD_REQUEST)
        return Response(counts)


class InventoryExportView(APIView):
    @extend_schema(parameters=[OpenApiParameter("as", str, enum=["yaml", "csv"],
                                                description="yaml (default): the whole inventory; csv: nodes only")],
                   responses={(200, "application/yaml"): str, (200, "text/csv"): str})
    def get(self, request):
        return inventory_download(request.query_params.get("as", "yaml"))
