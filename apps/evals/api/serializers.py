"""Evals API bodies. Settings are read by RunSettings.from_dict (the one reader the launch form and sweeps use);
these fields document them, and the service's own messages come back as the errors."""

from collections.abc import Mapping

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.deployments.models import Deployment

from ..choices import ApiStyle, EvalMode, EvalStatus
from ..datasets import SCORED_FAMILIES
from ..models import EvalRun, EvalSample, EvalSweep, slug_validator
from ..results import entries_of
from ..run_settings import (
    FLOAT_LIMITS,
    INT_LIMITS,
    MAX_SWEEP_POINTS,
    BadRunSettings,
    RunSettings,
    parse_concurrencies,
)
from ..selectors import PERCENTILE_STATS

# RunSettings field -> EvalRun field (the rest share their names)
RUN_FIELD = {"dataset": "dataset_key"}


def _int(name: str, help_text: str, **kwargs) -> serializers.IntegerField:
    low, high = INT_LIMITS[name]
    return serializers.IntegerField(required=False, min_value=low, max_value=high, help_text=help_text, **kwargs)


def _float(name: str, help_text: str) -> serializers.FloatField:
    low, high = FLOAT_LIMITS[name]
    return serializers.FloatField(required=False, min_value=low, max_value=high, help_text=help_text)


def settings_errors(exc: BadRunSettings) -> dict:
    """{field: [message]}, for a ValidationError (the Error shape flattens it to one error per field)."""
    return {name: [message] for name, message in exc.errors.items()}


class RunSettingsSerializer(serializers.Serializer):
    dataset = serializers.CharField(help_text="A dataset key from GET /api/evals/datasets/, e.g. "
                                              "catalogue:made-up-aime or upload:<name>")
    mode = serializers.ChoiceField(choices=EvalMode.choices, required=False, help_text="default accuracy")
    api_style = serializers.ChoiceField(choices=ApiStyle.choices, required=False, help_text="default chat")
    stream = serializers.BooleanField(required=False, help_text="default true")
    ignore_eos = serializers.BooleanField(
        required=False, help_text="fixed output length: the server ignores end-of-sequence, every answer is "
                                  "max_out_len tokens (AISBench's ignore_eos). Performance only: refused with mode "
                                  "accuracy; with mode both it applies to the performance pass. Default false")
    max_out_len = _int("max_out_len", "most tokens per answer (default 2048)")
    concurrency = _int("concurrency", "requests in flight (default 4)")
    request_rate = _float("request_rate", "requests per second; 0 = as fast as the concurrency allows (default)")
    temperature = _float("temperature", "sampling temperature (default 0.6)")
    num_prompts = _int("num_prompts", "the first N items; null = all (default)", allow_null=True)
    num_warmups = _int("num_warmups", "warm-up requests before measuring (default 1)")
    tokenizer_path = serializers.CharField(required=False, allow_blank=True,
                                           help_text="Tokenizer directory on the host that runs ais_bench; needed "
                                                     "for performance runs (the simulated cluster has a default)")
    time_limit_s = _int("time_limit_s", "the run is stopped after this many seconds (default 3600)")

    def to_internal_value(self, data) -> RunSettings:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError("expected an object of run settings")
        try:
            return RunSettings.from_dict(data)
        except BadRunSettings as exc:
            raise serializers.ValidationError(settings_errors(exc)) from None


class SweepSettingsSerializer(RunSettingsSerializer):
    """The settings every point of a sweep shares: mode is performance and each point has its own concurrency."""

    mode = None
    concurrency = None

    def to_internal_value(self, data) -> RunSettings:
        if isinstance(data, Mapping):
            fixed = [name for name in ("mode", "concurrency") if name in data]
            if fixed:
                raise serializers.ValidationError({name: ["set by the sweep (performance, one run per concurrency)"]
                                                   for name in fixed})
            data = {**data, "mode": EvalMode.PERFORMANCE}
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """A body with a key it does not know is a 400 naming that key (DRF would ignore it)."""

    def validate(self, attrs):
        unknown = [k for k in self.initial_data if k not in self.fields] if isinstance(self.initial_data,
                                                                                        Mapping) else []
        if unknown:
            known = ", ".join(self.fields)
            raise serializers.ValidationError({k: [f"unknown field; known: {known}"] for k in unknown})
        return attrs


class EvalRunCreateSerializer(StrictSerializer):
    """A run against the deployment's active revision; a key the body does not know is a 400 naming it."""

    deployment = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.all(),
                                                    help_text="its active revision is evaluated")
    settings = RunSettingsSerializer()


@extend_schema_field({"type": "array", "items": {"type": "integer", "minimum": INT_LIMITS["concurrency"][0],
                                                 "maximum": INT_LIMITS["concurrency"][1]},
                      "minItems": 2, "maxItems": MAX_SWEEP_POINTS})
class ConcurrenciesField(serializers.Field):
    """[1, 2, 4, 8] or "1,2,4,8": distinct values, run in ascending order."""

    def to_internal_value(self, data) -> list[int]:
        try:
            return parse_concurrencies(data)
        except BadRunSettings as exc:
            raise serializers.ValidationError(exc.errors["concurrencies"]) from None

    def to_representation(self, value):
        return value


class EvalSweepCreateSerializer(StrictSerializer):
    """One performance run per concurrency, run one after the other; a key the body does not know is a 400."""

    deployment = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.all(),
                                                    help_text="its active revision is evaluated")
    concurrencies = ConcurrenciesField(help_text=f"2 to {MAX_SWEEP_POINTS} concurrencies, one performance run each")
    settings = SweepSettingsSerializer()


class RunSettingsOutSerializer(serializers.Serializer):
    """The settings as a run stored them (POST them again to repeat the run)."""

    dataset = serializers.CharField()
    mode = serializers.ChoiceField(choices=EvalMode.choices)
    api_style = serializers.ChoiceField(choices=ApiStyle.choices)
    stream = serializers.BooleanField()
    ignore_eos = serializers.BooleanField(help_text="fixed output length (performance pass only)")
    max_out_len = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    request_rate = serializers.FloatField()
    temperature = serializers.FloatField()
    num_prompts = serializers.IntegerField(allow_null=True)
    num_warmups = serializers.IntegerField()
    tokenizer_path = serializers.CharField()
    time_limit_s = serializers.IntegerField()

    def to_representation(self, run: EvalRun) -> dict:
        return {name: getattr(run, RUN_FIELD.get(name, name)) for name in self.fields}


class RunLinksSerializer(serializers.Serializer):
    self = serializers.CharField()
    page = serializers.CharField(help_text="the run's page")
    samples = serializers.CharField()
    cancel = serializers.CharField()
    resume = serializers.CharField()
    job = serializers.CharField(allow_null=True)
    events = serializers.CharField(allow_null=True, help_text="the job's events (its log), null before it has a job")
    deployment = serializers.CharField(allow_null=True)
    sweep = serializers.CharField(allow_null=True)

    def to_representation(self, run: EvalRun) -> dict:
        def run_link(name):
            return reverse(f"eval-run-{name}", args=[run.pk])

        return {"self": run_link("detail"), "page": reverse("evals:detail", args=[run.pk]),
                "samples": run_link("samples"), "cancel": run_link("cancel"), "resume": run_link("resume"),
                "job": reverse("job-detail", args=[run.job_id]) if run.job_id else None,
                "events": reverse("job-events", args=[run.job_id]) if run.job_id else None,
                "deployment": reverse("deployment-detail", args=[run.deployment_id]) if run.deployment_id else None,
                "sweep": reverse("eval-sweep-detail", args=[run.sweep_id]) if run.sweep_id else None}


LIST_FIELDS = ["id", "deployment", "deployment_name", "revision_number", "simulated", "mode", "dataset_key",
               "dataset_abbr", "concurrency", "ignore_eos", "sweep", "job", "status", "status_label", "phase", "progress_done",
               "progress_total", "percent", "accuracy", "source", "created_by", "created", "started", "finished"]


class EvalRunSerializer(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    percent = serializers.IntegerField(read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)

    class Meta:
        model = EvalRun
        fields = LIST_FIELDS
        read_only_fields = fields


class EvalRunDetailSerializer(EvalRunSerializer):
    settings = RunSettingsOutSerializer(source="*", read_only=True)
    links = RunLinksSerializer(source="*", read_only=True)
    # Not read-only so the schema marks it optional: it is sent only with ?include=requests.
    perf_requests = serializers.JSONField(required=False, help_text="one entry per request; only with "
                                                                    "?include=requests")

    class Meta(EvalRunSerializer.Meta):
        fields = LIST_FIELDS + [
            "settings", "revision", "revision_spec", "endpoint_url", "served_model", "client_node", "dataset_family",
            "dataset_sha256", "explanation", "log_tail", "timestamps", "imported_from", "note", "results",
            "accuracy_detail", "perf_summary", "perf_percentiles", "perf_requests", "links"]
        read_only_fields = [f for f in fields if f != "perf_requests"]

    results = serializers.JSONField(read_only=True, help_text="every figure AISBench wrote, one entry per (model, "
                                                              "dataset): docs/evals.md, Results")

    def to_representation(self, run):
        data = super().to_representation(run)
        data["results"] = entries_of(run)
        if not self.context.get("include_requests"):
            data.pop("perf_requests")
        return data


class EvalSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvalSample
        fields = ["model", "dataset", "index", "question", "prediction", "extracted", "reference", "correct", "failed",
                  "error"]
        read_only_fields = fields


class PercentilesSerializer(serializers.Serializer):
    """null: the run's <dataset>.csv had no such column (AISBench writes the percentiles it was configured for)."""

    avg = serializers.FloatField(allow_null=True)
    median = serializers.FloatField(allow_null=True)
    p50 = serializers.FloatField(allow_null=True)
    p75 = serializers.FloatField(allow_null=True)
    p90 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


def _percentiles(run: EvalRun, metric: str) -> dict:
    stats = (run.perf_percentiles or {}).get(metric) or {}
    return {stat: stats.get(stat) for stat in PERCENTILE_STATS}


class SweepPointSerializer(serializers.Serializer):
    """One run of a sweep: its state and the point it adds to the throughput/latency curves (ms)."""

    id = serializers.IntegerField()
    concurrency = serializers.IntegerField()
    ignore_eos = serializers.BooleanField(help_text="fixed output length: every answer max_out_len tokens")
    max_out_len = serializers.IntegerField()
    status = serializers.ChoiceField(choices=EvalStatus.choices)
    percent = serializers.IntegerField()
    job = serializers.IntegerField(allow_null=True)
    request_throughput = serializers.FloatField(allow_null=True, help_text="req/s")
    output_token_throughput = serializers.FloatField(allow_null=True, help_text="token/s")
    ttft = PercentilesSerializer()
    tpot = PercentilesSerializer()

    def to_representation(self, run: EvalRun) -> dict:
        summary = run.perf_summary or {}
        return {"id": run.pk, "concurrency": run.concurrency, "ignore_eos": run.ignore_eos,
                "max_out_len": run.max_out_len, "status": run.status, "percent": run.percent,
                "job": run.job_id, "request_throughput": summary.get("request_throughput"),
                "output_token_throughput": summary.get("output_token_throughput"),
                "ttft": _percentiles(run, "TTFT"), "tpot": _percentiles(run, "TPOT")}


class EvalSweepSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)

    class Meta:
        model = EvalSweep
        fields = ["id", "deployment", "deployment_name", "concurrencies", "created_by", "created"]
        read_only_fields = fields


class EvalSweepDetailSerializer(EvalSweepSerializer):
    runs = serializers.SerializerMethodField()

    class Meta(EvalSweepSerializer.Meta):
        fields = EvalSweepSerializer.Meta.fields + ["runs"]
        read_only_fields = fields

    @extend_schema_field(SweepPointSerializer(many=True))
    def get_runs(self, sweep: EvalSweep) -> list[dict]:
        return SweepPointSerializer(sweep.runs.order_by("concurrency"), many=True).data


class DatasetSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="what a run's settings.dataset names")
    name = serializers.CharField()
    family = serializers.CharField(help_text="how it is scored")
    title = serializers.CharField()
    present = serializers.BooleanField(help_text="the file is where it belongs")
    lines = serializers.IntegerField(allow_null=True)
    runnable = serializers.BooleanField()
    problem = serializers.CharField(help_text="why it cannot run; empty when it can")
    simulated_only = serializers.BooleanField(help_text="only the simulated model knows its answers")


class DatasetUploadSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63, validators=[slug_validator],
                                 help_text="lowercase letters, digits, '_' and '-', starting with a letter or digit")
    family = serializers.ChoiceField(choices=SCORED_FAMILIES, help_text="aime: integer answers; gsm8k: answers "
                                                                         "ending '#### <number>'")
    description = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    file = serializers.FileField(help_text="JSONL, one {\"question\": ..., \"answer\": ...} per line")


class CompareRowSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="accuracy (the score), score:<metric> (another accuracy metric, e.g. "
                                          "score:pass@4), a summary figure (request_throughput...), or "
                                          "<latency>.<stat> (TTFT.p95)")
    part = serializers.ChoiceField(choices=["accuracy", "summary", "latency"])
    label = serializers.CharField()
    unit = serializers.CharField()
    better = serializers.ChoiceField(choices=["higher", "lower"])
    values = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                   help_text="one per column; null: that column has no such figure")
    deltas = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                   help_text="percent against the first column")
    regressions = serializers.ListField(child=serializers.BooleanField(),
                                        help_text="worse than the first column by more than 5% (any accuracy drop)")


class CompareColumnSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    model = serializers.CharField(help_text="the model as AISBench named it")
    imported = serializers.BooleanField(help_text="the run was imported from AISBench's files, not run here")
    imported_from = serializers.CharField(help_text="the file an imported run was read from; empty otherwise")

    def to_representation(self, column) -> dict:
        run = column.run
        return {"run": run.pk, "model": column.model, "imported": run.imported, "imported_from": run.imported_from}


class CompareTableSerializer(serializers.Serializer):
    dataset = serializers.CharField()
    columns = CompareColumnSerializer(many=True, help_text="every (run, model) with the dataset, in the order the "
                                                          "runs were asked; the first is the table's baseline")
    rows = CompareRowSerializer(many=True, help_text="figures at each column's headline stage")


class SpecChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class TopologyChangesSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    baseline = serializers.IntegerField()
    changes = SpecChangeSerializer(many=True)
    problem = serializers.CharField(help_text="why the specs could not be compared (an imported run without a "
                                              "topology, an unreadable spec); empty when they were")


class ComparisonSerializer(serializers.Serializer):
    runs = EvalRunSerializer(many=True, help_text="in the order asked; the first is the baseline")
    tables = CompareTableSerializer(many=True, help_text="one per dataset, in the order the runs first name them")
    rows = CompareRowSerializer(many=True, help_text="the first table's rows (kept for clients of one-dataset runs)")
    topology_changes = TopologyChangesSerializer(many=True, help_text="what the spec of each later run changed "
                                                                      "against the baseline's")
    notes = serializers.ListField(child=serializers.CharField())
