"""GET /api/evals/advisor/: the P:D ratio advisor's content as JSON (the page's: apps/evals/advisor_views.py)."""

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..advisor import (
    DEFAULT_STAT,
    MAX_TARGET_MS,
    STATS,
    BadAdvisorQuery,
    Group,
    LayoutAdvice,
    Point,
    parse_query,
)
from ..advisor_selectors import advisor_for

QUERY_PARAMS = ("ttft_ms", "tpot_ms", "stat", "group", "format")


class AdvisorGroupSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="what ?group= takes: <model>|<dataset>|<max_out_len>, or "
                                          "<model>|<dataset>|fixed:<max_out_len> for a fixed output length")
    model = serializers.CharField(help_text="the served model name")
    dataset = serializers.CharField()
    max_out_len = serializers.IntegerField()
    fixed_length = serializers.BooleanField(help_text="every answer max_out_len tokens (ignore_eos runs)")
    runs = serializers.IntegerField(help_text="measured runs in the group")
    api_styles = serializers.ListField(child=serializers.CharField())
    input_tokens_mean = serializers.ListField(child=serializers.FloatField(), allow_null=True,
                                              help_text="the lowest and highest mean input length of its runs")

    def to_representation(self, group: Group) -> dict:
        return {"key": group.key.text, "model": group.key.model, "dataset": group.key.dataset,
                "max_out_len": group.key.max_out_len, "fixed_length": group.key.fixed_length, "runs": group.runs, "api_styles": list(group.api_styles),
                "input_tokens_mean": list(group.input_tokens) if group.input_tokens else None}


class AdvisorRunLinksSerializer(serializers.Serializer):
    run = serializers.CharField(help_text="the run in the API")
    page = serializers.CharField(help_text="the run's page")
    sweep = serializers.CharField(allow_null=True)
    sweep_page = serializers.CharField(allow_null=True)


def _links(record) -> dict:
    sweep = record.sweep_id
    return {"run": reverse("eval-run-detail", args=[record.run_id]),
            "page": reverse("evals:detail", args=[record.run_id]),
            "sweep": reverse("eval-sweep-detail", args=[sweep]) if sweep else None,
            "sweep_page": reverse("evals:sweep", args=[sweep]) if sweep else None}


class AdvisorPointSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    sweep = serializers.IntegerField(allow_null=True)
    deployment_name = serializers.CharField()
    revision_number = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    output_token_throughput = serializers.FloatField(help_text="token/s")
    request_throughput = serializers.FloatField(allow_null=True, help_text="req/s")
    throughput_per_npu = serializers.FloatField(help_text="output token/s per NPU of the layout (Prefill + Decode)")
    ttft_ms = serializers.FloatField(allow_null=True, help_text="at the chosen statistic; null: not in the run's "
                                                               "results")
    tpot_ms = serializers.FloatField(allow_null=True, help_text="at the chosen statistic; null: not in the run's "
                                                               "results")
    meets = serializers.BooleanField(allow_null=True, help_text="met every target given; null: not judged, the "
                                                                "run's results lack a targeted statistic")
    misses = serializers.ListField(child=serializers.CharField(), help_text="each target missed, by how much; or "
                                                                            "the statistic the run lacks and the "
                                                                            "ones it has")
    links = AdvisorRunLinksSerializer()

    def to_representation(self, p: Point) -> dict:
        r = p.record
        return {"run": r.run_id, "sweep": r.sweep_id, "deployment_name": r.deployment, "revision_number": r.revision,
                "concurrency": r.concurrency, "output_token_throughput": r.output_throughput,
                "request_throughput": r.request_throughput, "throughput_per_npu": p.per_npu, "ttft_ms": p.ttft_ms,
                "tpot_ms": p.tpot_ms, "meets": p.meets, "misses": list(p.misses), "links": _links(r)}


class AdvisorLayoutSerializer(serializers.Serializer):
    layout = serializers.CharField(help_text='e.g. "2P(tp8 dp1) : 1D(tp4 dp4)"')
    prefill_instances = serializers.IntegerField()
    decode_instances = serializers.IntegerField()
    prefill_npus = serializers.IntegerField()
    decode_npus = serializers.IntegerField()
    total_npus = serializers.IntegerField()
    ratio_npus = serializers.CharField(help_text="P:D by NPUs, in lowest terms")
    ratio_instances = serializers.CharField(help_text="P:D by instances, in lowest terms")
    best = AdvisorPointSerializer(allow_null=True, help_text="the run that met the targets at the highest throughput per NPU")
    closest_miss = AdvisorPointSerializer(allow_null=True, help_text="when no run met them: the run nearest the targets")
    runs = AdvisorPointSerializer(many=True, help_text="every measured run of the layout, by concurrency")

    def to_representation(self, a: LayoutAdvice) -> dict:
        lay = a.layout
        point = AdvisorPointSerializer()
        return {"layout": lay.key, "prefill_instances": lay.prefill_instances,
                "decode_instances": lay.decode_instances, "prefill_npus": lay.prefill_npus,
                "decode_npus": lay.decode_npus, "total_npus": lay.total_npus, "ratio_npus": lay.ratio_npus,
                "ratio_instances": lay.ratio_instances,
                "best": point.to_representation(a.best) if a.best else None,
                "closest_miss": point.to_representation(a.closest_miss) if a.closest_miss else None,
                "runs": [point.to_representation(p) for p in a.points]}


class AdvisorTargetsSerializer(serializers.Serializer):
    ttft_ms = serializers.FloatField(allow_null=True, help_text="null: no TTFT limit")
    tpot_ms = serializers.FloatField(allow_null=True, help_text="null: no TPOT limit")
    stat = serializers.ChoiceField(choices=list(STATS))


class AdvisorUnreadableSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    deployment_name = serializers.CharField()
    reason = serializers.CharField(help_text="why the stored spec copy gives no layout")
    links = AdvisorRunLinksSerializer()


class AdvisorSerializer(serializers.Serializer):
    advice = serializers.CharField(help_text="the recommendation in words, naming the runs and layouts it rests on")
    recommendation = AdvisorLayoutSerializer(allow_null=True, help_text="null: no measured layout met the targets")
    targets = AdvisorTargetsSerializer()
    group = AdvisorGroupSerializer(allow_null=True, help_text="the group advised on; null: no measured runs at all")
    groups = AdvisorGroupSerializer(many=True, help_text="every group with measured runs, the most runs first")
    runs_considered = serializers.IntegerField(help_text="measured runs with a readable layout in the group")
    layouts = AdvisorLayoutSerializer(many=True, help_text="the recommendation first, then the other layouts that "
                                                          "met the targets, then the closest misses")
    unreadable = AdvisorUnreadableSerializer(many=True, help_text="runs of the group listed as layout unreadable")


def _stat_help() -> str:
    return (f"the latency statistic judged, default {DEFAULT_STAT} (median and p50 are one); a run whose results "
            "lack it is not judged, and says which it has")


class EvalAdvisorView(APIView):
    pagination_class = None

    @extend_schema(parameters=[
        OpenApiParameter("ttft_ms", float, description=f"TTFT target in ms (above 0, at most {MAX_TARGET_MS:,.0f}); "
                                                       "absent: no TTFT limit"),
        OpenApiParameter("tpot_ms", float, description="TPOT target in ms; absent: no TPOT limit"),
        OpenApiParameter("stat", str, enum=list(STATS), description=_stat_help()),
        OpenApiParameter("group", str, description="<model>|<dataset>|[fixed:]<max_out_len> from groups[].key; absent: "
                                                   "the group with the most runs")],
        responses={200: AdvisorSerializer,
                   400: OpenApiResponse(description="a parameter is bad or unknown, or the group has no measured "
                                                    "runs (each error names its parameter)")})
    def get(self, request, format=None):
        """Which P:D layout met the TTFT/TPOT targets at the highest output throughput per NPU, from succeeded
        performance runs of one model + dataset + max output length; every figure names its run."""
        unknown = sorted(set(request.query_params) - set(QUERY_PARAMS))
        if unknown:
            raise ValidationError({name: [f"unknown query parameter; known here: {', '.join(QUERY_PARAMS[:4])}"]
                                   for name in unknown})
        try:
            targets, group_key = parse_query(request.query_params)
            view = advisor_for(targets, group_key)
        except BadAdvisorQuery as exc:
            raise ValidationError({name: [message] for name, message in exc.errors.items()}) from None
        advice = view.advice
        layouts = AdvisorLayoutSerializer(advice.layouts, many=True).data
        return Response({
            "advice": advice.text, "recommendation": layouts[0] if advice.recommendation else None,
            "targets": {"ttft_ms": targets.ttft_ms, "tpot_ms": targets.tpot_ms, "stat": targets.stat},
            "group": AdvisorGroupSerializer(view.group).data if view.group else None,
            "groups": AdvisorGroupSerializer(view.groups, many=True).data, "runs_considered": advice.runs,
            "layouts": layouts,
            "unreadable": [{"run": u.record.run_id, "deployment_name": u.record.deployment, "reason": u.reason,
                            "links": _links(u.record)} for u in advice.unreadable]})
