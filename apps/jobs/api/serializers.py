from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..choices import JobStatus
from ..models import Job, JobEvent, JobNodeSummary
from ..waiting import job_waiting
from ..workers import STALE_SECONDS, RegistryUnavailable, live_workers


class JobNodeSummarySerializer(serializers.ModelSerializer):
    percent = serializers.IntegerField(read_only=True)

    class Meta:
        model = JobNodeSummary
        fields = ["node", "state", "steps_done", "steps_total", "percent", "message"]


class JobLinksSerializer(serializers.Serializer):
    job = serializers.CharField(help_text="this job (GET ?wait=N holds the answer until it ends, at most N s)")
    events = serializers.CharField(help_text="its log lines; ?counter__gt=N for the ones after N")
    cancel = serializers.CharField()
    page = serializers.CharField(help_text="the job's page")

    def to_representation(self, job: Job) -> dict:
        return job_links(job)


class JobWaitingSerializer(serializers.Serializer):
    pending_s = serializers.FloatField(help_text="seconds since the job was created")
    queue = serializers.CharField(help_text="the Celery queue that runs it")
    workers = serializers.IntegerField(allow_null=True, help_text="live workers consuming that queue; null when "
                                                                  "the registry cannot be read")
    message = serializers.CharField()


def job_links(job: Job) -> dict:
    return {"job": reverse("job-detail", args=[job.pk]), "events": reverse("job-events", args=[job.pk]),
            "cancel": reverse("job-cancel", args=[job.pk]), "page": reverse("jobs:detail", args=[job.pk])}


class JobSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    duration_seconds = serializers.FloatField(read_only=True, allow_null=True,
                                              help_text="null until the job has started")
    node_summaries = JobNodeSummarySerializer(many=True, read_only=True)
    waiting = serializers.SerializerMethodField()
    links = JobLinksSerializer(source="*", read_only=True)

    class Meta:
        model = Job
        fields = ["id", "kind", "status", "target_type", "target_id", "target_label", "params", "created_by",
                  "created", "started", "finished", "duration_seconds", "explanation", "cancel_requested",
                  "event_count", "node_summaries", "waiting", "links"]
        read_only_fields = fields

    @extend_schema_field(JobWaitingSerializer(allow_null=True,
                                              help_text="null unless pending: how long, and whether any worker "
                                                        "consumes its queue"))
    def get_waiting(self, job: Job) -> dict | None:
        if job.status != JobStatus.PENDING:
            return None
        workers = self.context.get("live_workers")  # one registry read per answer, however many jobs are pending
        if workers is None:
            try:
                workers = self.context["live_workers"] = live_workers()
            except RegistryUnavailable:
                return job_waiting(job)  # which says the registry cannot be read
        return job_waiting(job, workers)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["counter", "time", "node", "stream", "text"]


class QueueStatusSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="ssh, telemetry or evals")
    queue = serializers.CharField(help_text="the Celery queue name (namespaced per installation)")
    workers = serializers.IntegerField(help_text=f"live workers consuming it (seen in the last {STALE_SECONDS:.0f} s)")
    names = serializers.ListField(child=serializers.CharField(), help_text="host name and pid of each")
    last_seen = serializers.DateTimeField(allow_null=True, help_text="the latest refresh of any of them")
