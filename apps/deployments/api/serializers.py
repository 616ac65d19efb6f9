from rest_framework import serializers

from apps.accounts.api_errors import ErrorSerializer
from apps.inventory.models import Cluster
from apps.jobs.choices import JobKind

from ..job_params import LIMITS, ROLES, BadJobParams, JobParams
from ..models import Deployment, Process, Revision


class RevisionSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True,
                                       help_text="who saved it (null: the user was deleted)")

    class Meta:
        model = Revision
        fields = ["id", "deployment", "number", "is_active", "comment", "launch_profile", "served_model",
                  "created_by", "created", "spec", "yaml_text"]
        read_only_fields = fields


class RevisionCreateSerializer(serializers.Serializer):
    yaml_text = serializers.CharField(required=False, trim_whitespace=False, help_text="The spec as YAML")
    spec = serializers.JSONField(required=False, help_text="The spec as plain data (instead of yaml_text)")
    comment = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    activate = serializers.BooleanField(required=False, default=False,
                                        help_text="make it the active revision at once (it must validate against "
                                                  "the inventory); nothing is deployed")

    def validate(self, attrs):
        if ("yaml_text" in attrs) == ("spec" in attrs):
            raise serializers.ValidationError({"yaml_text": "send exactly one of yaml_text or spec"})
        return attrs


class DeploymentSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    yaml_text = serializers.CharField(write_only=True, required=False, trim_whitespace=False,
                                      help_text="The first revision's spec (create only)")
    active_revision = serializers.IntegerField(source="active_number", read_only=True, allow_null=True)
    active_revision_id = serializers.IntegerField(source="active_id", read_only=True, allow_null=True)
    launch_profile = serializers.CharField(read_only=True, allow_null=True)
    served_model = serializers.CharField(read_only=True, allow_null=True)
    revision_count = serializers.IntegerField(read_only=True)
    running_count = serializers.IntegerField(read_only=True)
    secret_problem = serializers.CharField(read_only=True, help_text="Why the proxy admin token cannot be "
                                                                     "decrypted (empty when it can)")

    class Meta:
        model = Deployment
        fields = ["id", "name", "cluster", "cluster_name", "description", "yaml_text", "active_revision",
                  "active_revision_id", "launch_profile", "served_model", "revision_count", "running_count",
                  "secret_problem", "created", "updated"]

    def validate(self, attrs):
        if self.instance is None and not attrs.get("yaml_text"):
            raise serializers.ValidationError({"yaml_text": "a new deployment needs its first spec"})
        if self.instance is not None and "cluster" in attrs and attrs["cluster"] != self.instance.cluster:
            raise serializers.ValidationError({"cluster": "a deployment cannot move to another cluster"})
        return attrs


class ProcessSerializer(serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    revision_number = serializers.IntegerField(source="revision.number", read_only=True, allow_null=True)

    class Meta:
        model = Process
        fields = ["id", "deployment", "deployment_name", "revision", "revision_number", "node", "node_name", "role",
                  "instance", "key", "address", "ports", "health_url", "pid", "command", "log_path", "pid_file",
                  "state", "state_detail", "started_at", "stopped_at", "last_job", "updated"]
        read_only_fields = fields


def _limited(name: str, help_text: str) -> serializers.IntegerField:
    low, high = LIMITS[name]
    return serializers.IntegerField(required=False, min_value=low, max_value=high, help_text=help_text)


class JobParamsSerializer(serializers.Serializer):
    """The fields document the body; reading it is JobParams.from_dict's, so the API answers a bad value with the
    service's own error."""

    job_kind = JobKind.DEPLOY
    max_parallel = _limited("max_parallel", "SSH fan-out bound (default 8)")
    sequential = serializers.BooleanField(required=False, help_text="one node at a time (max_parallel=1)")
    health_timeout = _limited("health_timeout", "seconds to wait for each stage to be healthy (default 120)")
    stop_grace = _limited("stop_grace", "seconds between TERM and KILL (default 10)")
    keep_on_failure = serializers.BooleanField(required=False, help_text="leave what a failed job started running")

    def to_internal_value(self, data) -> JobParams:
        try:
            return JobParams.from_dict(data, kind=self.job_kind)
        except BadJobParams as exc:
            raise serializers.ValidationError({k: [v] for k, v in exc.errors.items()}) from None


class RestartParamsSerializer(JobParamsSerializer):
    job_kind = JobKind.RESTART
    instance = serializers.CharField(help_text="instance name from the active revision")


class RollingRestartParamsSerializer(JobParamsSerializer):
    job_kind = JobKind.ROLLING_RESTART
    role = serializers.ChoiceField(choices=list(ROLES))


class ActivateSerializer(serializers.Serializer):
    revision = serializers.IntegerField(help_text="revision number to activate")
    deploy = serializers.BooleanField(required=False, default=False, help_text="deploy it at once (rollback)")


class ProblemSerializer(serializers.Serializer):
    """An Error item; a spec's problem has all five keys, an error in the request's other fields the first two."""

    field = serializers.CharField(allow_null=True, help_text="where: in a spec problem the field within `instance` "
                                                             "(tp, env.BROWSER; empty: the instance as a whole), "
                                                             "or the spec path when no instance is named")
    message = serializers.CharField()
    path = serializers.CharField(required=False, help_text="the spec path: instances[0].dp, run_dir, yaml (the "
                                                           "text does not parse), spec (the whole spec)")
    instance = serializers.CharField(required=False, allow_null=True,
                                     help_text="the instance's name when the path is in one")
    suggestion = serializers.CharField(required=False, help_text="a fix to try (may be empty)")


class ProblemsSerializer(ErrorSerializer):
    """The Error shape (apps/accounts/api_errors.py); a spec that does not validate lists its problems."""

    errors = ProblemSerializer(many=True)


class PlanProcessSerializer(serializers.Serializer):
    key = serializers.CharField()
    role = serializers.CharField()
    instance = serializers.CharField(allow_null=True)
    ports = serializers.ListField(child=serializers.IntegerField())
    kv_port_window = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    health_url = serializers.CharField(allow_null=True)
    log_file = serializers.CharField()
    pid_file = serializers.CharField()
    command = serializers.CharField()


class PlanNodeSerializer(serializers.Serializer):
    node = serializers.CharField()
    address = serializers.CharField()
    processes = PlanProcessSerializer(many=True)


class PlanStageSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    name = serializers.CharField()
    nodes = PlanNodeSerializer(many=True)


class PlanSerializer(serializers.Serializer):
    revision = serializers.IntegerField()
    profile = serializers.CharField()
    text = serializers.CharField()
    stages = PlanStageSerializer(many=True)



class PlanFileSerializer(serializers.Serializer):
    path = serializers.CharField()
    mode = serializers.CharField(help_text="octal, as chmod takes it: 600")
    content = serializers.CharField(allow_blank=True)
    lines = serializers.ListField(child=serializers.CharField(allow_blank=True),
                                  help_text="sh that writes it: a quoted here-document (or printf), then chmod")


class PlanDocsProcessSerializer(serializers.Serializer):
    """One process as the docs write a launch (topology/plan_view.py)."""

    stage = serializers.CharField()
    key = serializers.CharField()
    role = serializers.CharField()
    instance = serializers.CharField(allow_null=True)
    node = serializers.CharField()
    address = serializers.CharField()
    ports = serializers.ListField(child=serializers.IntegerField())
    kv_port_window = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    health_url = serializers.CharField(allow_null=True)
    workdir = serializers.CharField()
    log_file = serializers.CharField()
    pid_file = serializers.CharField()
    files = PlanFileSerializer(many=True)
    exports = serializers.ListField(child=serializers.CharField(), help_text="export NAME=value, sh-quoted")
    command = serializers.ListField(child=serializers.CharField(),
                                    help_text="the program, then one flag with its values per entry; every entry "
                                              "but the last ends in ' \\'; JSON arguments pretty-printed")
    text = serializers.CharField(help_text="files, exports and command as one sh block")
    start_line = serializers.CharField(help_text="exactly what a deploy runs on the node: the host start line (pid "
                                                 "file, log, setsid) or, for a container, its `docker run` line")
    in_container = serializers.BooleanField(help_text="started as a container (runtime: container)")


class PlanWithProcessesSerializer(PlanSerializer):
    warnings = serializers.ListField(child=serializers.CharField(),
                                     help_text="the plan renders, but may not do what the spec meant or carries a hazard to choose knowingly")
    processes = PlanDocsProcessSerializer(many=True, help_text="every process in start order, as the docs write it")


class DiffEntrySerializer(serializers.Serializer):
    path = serializers.CharField()
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class DiffSerializer(serializers.Serializer):
    old = serializers.IntegerField()
    new = serializers.IntegerField()
    changes = DiffEntrySerializer(many=True)


class ProcessLogSerializer(serializers.Serializer):
    key = serializers.CharField()
    node = serializers.CharField()
    log_path = serializers.CharField()
    text = serializers.CharField()
