from rest_framework import serializers

from ..models import Job, JobEvent, JobNodeSummary


class JobNodeSummarySerializer(serializers.ModelSerializer):
    percent = serializers.IntegerField(read_only=True)

    class Meta:
        model = JobNodeSummary
        fields = ["node", "state", "steps_done", "steps_total", "percent", "message"]


class JobSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    duration_seconds = serializers.FloatField(read_only=True)
    node_summaries = JobNodeSummarySerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = ["id", "kind", "status", "target_type", "target_id", "target_label", "params", "created_by",
                  "created", "started", "finished", "duration_seconds", "explanation", "cancel_requested",
                  "event_count", "node_summaries"]
        read_only_fields = fields


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["counter", "time", "node", "stream", "text"]
