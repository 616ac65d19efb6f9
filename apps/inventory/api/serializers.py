from rest_framework import serializers

from apps.accounts.api_errors import ErrorSerializer

from ..allowlist import allowlist_problems, normal_allowlist
from ..models import Cluster, Node, Npu, SshCredential
from ..services import credential_save


class AllowedImageSerializer(serializers.Serializer):
    reference = serializers.CharField(help_text="<repository>:<tag>, an explicit tag other than latest")
    digest = serializers.CharField(required=False, help_text="sha256:<64 hex digits>, where known")


class AllowedMountSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="what a runtime: container topology names (container.mounts)")
    host_path = serializers.CharField(help_text="absolute path on the node (a directory or a file)")
    container_path = serializers.CharField(help_text="where it appears in the container")
    read_only = serializers.BooleanField(required=False, help_text="bind it read-only (:ro)")


class AllowlistSerializer(serializers.Serializer):
    """The shape, for the schema; allowlist_problems checks the values (and names each wrong field)."""

    images = AllowedImageSerializer(many=True, required=False)
    weights = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="directories below which model weights may be mounted")
    mindie_scripts = serializers.ListField(child=serializers.CharField(), required=False,
                                           help_text="MindIE kubernetes_deploy_scripts directories")
    mounts = AllowedMountSerializer(many=True, required=False)

    def to_internal_value(self, data):
        problems = allowlist_problems(data)
        if problems:
            raise serializers.ValidationError([f"{path}: {message}" for path, message in problems])
        return normal_allowlist(data)

    def to_representation(self, instance):
        return normal_allowlist(instance)


class ClusterSerializer(serializers.ModelSerializer):
    node_count = serializers.IntegerField(read_only=True)
    allowlist = AllowlistSerializer(required=False, help_text=Cluster._meta.get_field("allowlist").help_text)

    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "allowlist", "node_count", "created", "updated"]

    def to_representation(self, instance):
        if not hasattr(instance, "node_count"):  # a cluster just created: the view's queryset annotates the rest
            instance.node_count = instance.nodes.count()
        return super().to_representation(instance)


class SshCredentialSerializer(serializers.ModelSerializer):
    secret = serializers.CharField(write_only=True, required=False, trim_whitespace=False,
                                   style={"input_type": "password"},
                                   help_text="Private key text or password. Write-only: never returned. "
                                             "Required when creating, and when changing kind.")
    secret_problem = serializers.CharField(read_only=True, help_text="Why the stored secret cannot be used "
                                                                     "(empty when it can)")

    class Meta:
        model = SshCredential
        fields = ["id", "name", "username", "kind", "secret", "secret_problem", "public_key", "created", "updated"]
        read_only_fields = ["public_key"]

    def create(self, validated):
        secret = validated.pop("secret", None)
        return credential_save(SshCredential(**validated), secret=secret)

    def update(self, instance, validated):
        secret = validated.pop("secret", None)
        for key, value in validated.items():
            setattr(instance, key, value)
        return credential_save(instance, secret=secret)


class NodeSerializer(serializers.ModelSerializer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    credential_name = serializers.CharField(source="credential.name", read_only=True, allow_null=True)
    npu_total = serializers.IntegerField(read_only=True)
    npu_unhealthy = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = ["id", "cluster", "cluster_name", "name", "address", "ssh_port", "ssh_user", "credential",
                  "credential_name", "host_key", "hardware_model", "npu_model", "npu_count", "labels",
                  "reachability", "reachability_detail", "last_seen", "npu_total", "npu_unhealthy",
                  "created", "updated"]
        read_only_fields = ["reachability", "reachability_detail", "last_seen"]

    def validate(self, attrs):
        instance = Node(**{**({f: getattr(self.instance, f) for f in attrs} if self.instance else {}), **attrs})
        if self.instance:
            instance.pk = self.instance.pk
        instance.clean()
        return attrs

    def to_representation(self, instance):
        if not hasattr(instance, "npu_total"):  # a node just created: the view's queryset annotates the rest
            instance.npu_total = instance.npus.count()
            instance.npu_unhealthy = instance.npus.exclude(health="OK").count()
        return super().to_representation(instance)


class NpuSerializer(serializers.ModelSerializer):
    node_name = serializers.CharField(source="node.name", read_only=True)
    hbm_percent = serializers.FloatField(read_only=True)

    class Meta:
        model = Npu
        fields = ["id", "node", "node_name", "npu_id", "chip_id", "logical_id", "phy_id", "name", "bus_id",
                  "health", "hbm_used_mb", "hbm_total_mb", "hbm_percent", "aicore_percent", "power_w",
                  "temperature_c", "last_seen"]
        read_only_fields = fields


class HostKeyPinSerializer(serializers.Serializer):
    host_key = serializers.CharField(help_text="The key as fetched: '<type> <base64>'")
    fingerprint = serializers.CharField(help_text="The SHA256 fingerprint the operator compared and confirms")


class HostKeySerializer(serializers.Serializer):
    host_key = serializers.CharField()
    fingerprint = serializers.CharField()
    pinned = serializers.BooleanField()
    matches_pinned = serializers.BooleanField()


class InventoryImportSerializer(serializers.Serializer):
    file = serializers.FileField(required=False, help_text="YAML inventory, or CSV of nodes")
    text = serializers.CharField(required=False, help_text="The same, as text")

    def validate(self, attrs):
        if not attrs.get("file") and not attrs.get("text"):
            raise serializers.ValidationError({"file": "send a file or text"})
        return attrs


class InventoryFileErrorSerializer(serializers.Serializer):
    field = serializers.CharField(allow_null=True, help_text="the value's path in the file: "
                                                             "clusters[0].nodes[1].ssh_port")
    message = serializers.CharField()
    line = serializers.IntegerField(required=False, help_text="the line in the file (0: the file as a whole); "
                                                              "absent when the request itself is wrong")


class InventoryFileErrorsSerializer(ErrorSerializer):
    """The Error shape (apps/accounts/api_errors.py); a rejected file's errors name their lines."""

    errors = InventoryFileErrorSerializer(many=True)


class InventoryImportResultSerializer(serializers.Serializer):
    credentials = serializers.IntegerField()
    clusters = serializers.IntegerField()
    nodes_created = serializers.IntegerField()
    nodes_updated = serializers.IntegerField()
