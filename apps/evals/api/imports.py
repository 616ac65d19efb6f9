"""POST /api/evals/import/: an AISBench result made elsewhere becomes a run marked imported (apps/evals/run_import.py).
The file comes as multipart (file) or JSON (name + content_base64), or pasted console output as text."""

import base64
import binascii

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.roles import Role
from apps.deployments.models import Deployment

from ..models import EvalRun
from ..run_import import MAX_IMPORT_BYTES, ImportTarget, eval_import
from ..run_settings import BadRunSettings
from .serializers import EvalRunDetailSerializer, StrictSerializer, settings_errors


class EvalImportSerializer(StrictSerializer):
    file = serializers.FileField(required=False, help_text="multipart: an AISBench output folder (zip), a "
                                                           "summary_*.md/.txt/.csv, or a perf <dataset>.json/.csv")
    name = serializers.CharField(required=False, max_length=255,
                                 help_text="JSON: the file's name (its extension tells the form), with content_base64")
    content_base64 = serializers.CharField(required=False, help_text="JSON: the file's bytes, base64")
    text = serializers.CharField(required=False, trim_whitespace=False,
                                 help_text="console output pasted as printed (instead of a file)")
    deployment = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.all(), required=False,
                                                    allow_null=True, help_text="the deployment it ran on; none: "
                                                                               "an outside system (give label)")
    revision = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                        help_text="the revision number; default the deployment's active revision")
    label = serializers.CharField(required=False, allow_blank=True, max_length=63,
                                  help_text="without a deployment: names the outside system (default external)")
    concurrency = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1000,
                                           help_text="default: the Max Concurrency AISBench measured")
    max_out_len = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1_000_000,
                                           help_text="default: the longest answer measured")
    ignore_eos = serializers.BooleanField(required=False, default=False,
                                          help_text="every answer was max_out_len tokens (fixed output length)")
    dataset = serializers.CharField(required=False, allow_blank=True, max_length=80,
                                    help_text="the dataset key it corresponds to (GET /api/evals/datasets/), so the "
                                              "advisor groups it with runs of ours; default imported:<dataset>")
    note = serializers.CharField(required=False, allow_blank=True, max_length=300)

    def validate(self, attrs):
        attrs = super().validate(attrs)
        given = [k for k in ("file", "content_base64", "text") if attrs.get(k)]
        if len(given) != 1:
            raise ValidationError({"file": "give exactly one of file, content_base64 (with name) or text"})
        if "content_base64" in given:
            try:
                attrs["data"] = base64.b64decode(attrs["content_base64"], validate=True)
            except (binascii.Error, ValueError):
                raise ValidationError({"content_base64": "is not valid base64"}) from None
            if not attrs.get("name"):
                raise ValidationError({"name": "name the file: its extension tells zip, md, txt, csv or json"})
        if "file" in given:
            upload = attrs["file"]
            if upload.size > MAX_IMPORT_BYTES:
                raise ValidationError({"file": f"{upload.name} is larger than {MAX_IMPORT_BYTES >> 20} MB"})
            attrs["name"], attrs["data"] = upload.name, upload.read()
        return attrs


class EvalImportView(APIView):
    parser_classes = [JSONParser, MultiPartParser, FormParser]
    write_role = Role.OPERATOR

    @extend_schema(request=EvalImportSerializer,
                   responses={201: EvalRunDetailSerializer,
                              400: OpenApiResponse(description="a field is invalid (each error names it); a bad "
                                                               "file is named under file with its line and column, "
                                                               "and nothing is stored")})
    def post(self, request, format=None):
        """Import an AISBench result made elsewhere; the run is marked imported and shows in lists, compare and the
        advisor like a run of ours."""
        body = EvalImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        target = ImportTarget(deployment=v.get("deployment"), revision_number=v.get("revision"),
                              label=v.get("label", ""), concurrency=v.get("concurrency"),
                              max_out_len=v.get("max_out_len"), ignore_eos=v["ignore_eos"],
                              dataset_key=v.get("dataset", ""), note=v.get("note", ""))
        try:
            run = eval_import(user=request.user, target=target, name=v.get("name", ""), data=v.get("data"),
                              text=v.get("text", ""))
        except BadRunSettings as exc:
            raise ValidationError(settings_errors(exc)) from None
        run = EvalRun.objects.select_related("created_by").defer("perf_requests").get(pk=run.pk)
        return Response(EvalRunDetailSerializer(run, context={"request": request}).data,
                        status=status.HTTP_201_CREATED)
