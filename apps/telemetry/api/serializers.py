"""The topology snapshot's shape, for the OpenAPI schema (apps/telemetry/topology_snapshot.py builds it)."""

from rest_framework import serializers

from apps.deployments.api.serializers import ProblemSerializer


class TopologyDieSerializer(serializers.Serializer):
    logical_id = serializers.IntegerField()
    npu_id = serializers.IntegerField()
    chip_id = serializers.IntegerField()
    health = serializers.CharField(allow_null=True, help_text="npu-smi health; null when never discovered")
    health_colour = serializers.CharField()
    ok = serializers.BooleanField()
    discovered = serializers.BooleanField()
    hbm_percent = serializers.FloatField(allow_null=True)
    hbm_used_mb = serializers.IntegerField(allow_null=True)
    hbm_total_mb = serializers.IntegerField(allow_null=True)
    used_by = serializers.DictField(allow_null=True, help_text="instance, role, dp_rank and process key using it")


class TopologyNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    address = serializers.CharField()
    hardware_model = serializers.CharField()
    npu_model = serializers.CharField()
    npu_count = serializers.IntegerField()
    reachability = serializers.CharField()
    reachability_label = serializers.CharField()
    reachability_colour = serializers.CharField()
    column = serializers.ChoiceField(choices=["front", "prefill", "decode", "services"])
    roles = serializers.ListField(child=serializers.CharField())
    processes = serializers.ListField(child=serializers.CharField())
    instances = serializers.ListField(child=serializers.CharField(), help_text="instances with ranks on this node")
    span = serializers.DictField(allow_null=True, help_text="instance, index and of: this node is one of the nodes a "
                                                            "multi-node instance spans; null otherwise")
    dies = TopologyDieSerializer(many=True)


class TopologyLiveSerializer(serializers.Serializer):
    state = serializers.CharField(allow_null=True, help_text="running | stopped | failed | unknown; null: not started")
    state_label = serializers.CharField()
    state_colour = serializers.CharField()


class TopologyProcessSerializer(TopologyLiveSerializer):
    key = serializers.CharField()
    address = serializers.CharField()
    ports = serializers.ListField(child=serializers.IntegerField())
    health_url = serializers.CharField(allow_null=True)
    pid = serializers.IntegerField(allow_null=True)
    state_detail = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    started_revision = serializers.IntegerField(allow_null=True)


class TopologyRankSerializer(TopologyProcessSerializer):
    dp_rank = serializers.IntegerField()
    node = serializers.CharField(help_text="the node this rank runs on (an instance may span several)")
    headless = serializers.BooleanField(help_text="an internal-DP secondary started --headless: no API server")
    api_port = serializers.IntegerField(allow_null=True)
    devices = serializers.ListField(child=serializers.IntegerField(), help_text="ASCEND_RT_VISIBLE_DEVICES")
    kv_port_window = serializers.ListField(child=serializers.IntegerField(), allow_null=True)


class TopologySliceSerializer(TopologyLiveSerializer):
    node = serializers.CharField()
    ranks = serializers.ListField(child=serializers.IntegerField(), help_text="first and last global DP rank here")
    api_ports = serializers.ListField(child=serializers.IntegerField())
    devices = serializers.ListField(child=serializers.IntegerField())
    processes = serializers.IntegerField()
    keys = serializers.ListField(child=serializers.CharField())
    kv_port_window = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    headless = serializers.BooleanField()


class TopologyInstanceSerializer(TopologyLiveSerializer):
    id = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField()
    role_colour = serializers.CharField()
    node = serializers.CharField(help_text="its first node: the DP master")
    nodes = serializers.ListField(child=serializers.CharField(), help_text="every node it spans, the master first")
    tp = serializers.IntegerField()
    dp = serializers.IntegerField()
    dp_local = serializers.IntegerField(help_text="DP ranks on each node")
    dp_style = serializers.CharField()
    span_label = serializers.CharField()
    kv_port_window = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    ranks = TopologyRankSerializer(many=True)
    slices = TopologySliceSerializer(many=True, help_text="its part on each node it spans, in span order")
    health = serializers.DictField(allow_null=True, help_text="its health state from the last scrape round "
                                                              "(docs/health-policy.md); null when none")


class TopologyServiceSerializer(TopologyProcessSerializer):
    id = serializers.CharField()
    role = serializers.CharField()
    role_colour = serializers.CharField()
    node = serializers.CharField()
    backend = serializers.CharField(allow_null=True, help_text="kv_pool: mooncake | memcache; store: memcached")
    health = serializers.DictField(allow_null=True, help_text="its health state from the last scrape round; null "
                                                              "when none")


class TopologyEdgeSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.ChoiceField(choices=["request", "kv_transfer", "kv_fabric", "kv_backup", "kv_pool"],
                                   help_text="kv_fabric: a large P->D mesh, one edge per instance into (Prefill) or "
                                             "out of (Decode) the KV fabric instead of one per pair")
    source = serializers.CharField()
    target = serializers.CharField()
    label = serializers.CharField()
    source_window = serializers.ListField(child=serializers.IntegerField(), required=False)
    mode = serializers.CharField(required=False, help_text="kv_pool: what the instance does with the pool")
    target_window = serializers.ListField(child=serializers.IntegerField(), required=False)
    side = serializers.ChoiceField(choices=["out", "in"], required=False, help_text="kv_fabric: the instance's side")


class TopologyKvMeshSerializer(serializers.Serializer):
    prefills = serializers.IntegerField()
    decodes = serializers.IntegerField()
    pairs = serializers.IntegerField()
    aggregated = serializers.BooleanField(help_text="more pairs than max_drawn_pairs: drawn as kv_fabric edges")
    max_drawn_pairs = serializers.IntegerField()


class TopologyLiveRoundSerializer(serializers.Serializer):
    """The telemetry's last scrape round (apps/telemetry/selectors.py live_view)."""

    at = serializers.FloatField()
    age_s = serializers.FloatField()
    stale = serializers.BooleanField()
    interval_s = serializers.FloatField(allow_null=True)
    kv_bytes_per_token = serializers.IntegerField(allow_null=True)
    aggregated = serializers.BooleanField(help_text="a large P->D mesh: `edges` holds only its busy pairs and "
                                                    "`history.edges` is empty")
    instances = serializers.DictField(child=serializers.DictField(), help_text="instance name -> its live figures")
    edges = serializers.DictField(child=serializers.DictField(), help_text="edge id -> its flow")
    kv_fabric = serializers.DictField(
        child=serializers.DictField(), help_text="instance name -> {out|in: {kv_bytes_s, req_s, pairs, peers}}: its "
                                                 "busy pairs summed, peers the busiest [peer, kv_bytes_s, req_s]")
    services = serializers.DictField(child=serializers.DictField())
    pool = serializers.DictField(allow_null=True)
    health = serializers.DictField(child=serializers.DictField())
    targets = serializers.ListField(child=serializers.DictField())
    history = serializers.DictField(help_text="at, instances (sparkline fields per instance), edges (P->D pairs' "
                                              "KV bytes/s; empty for a large mesh)")


class TopologySerializer(serializers.Serializer):
    deployment = serializers.DictField()
    revision = serializers.DictField(allow_null=True)
    profile = serializers.CharField(allow_null=True)
    problems = ProblemSerializer(many=True, help_text="why the active revision cannot be planned (then no nodes)")
    client = serializers.DictField(allow_null=True)
    nodes = TopologyNodeSerializer(many=True)
    instances = TopologyInstanceSerializer(many=True)
    services = TopologyServiceSerializer(many=True)
    edges = TopologyEdgeSerializer(many=True)
    stray_processes = serializers.ListField(child=serializers.DictField(),
                                            help_text="live processes the active plan does not name")
    active_job = serializers.DictField(allow_null=True, help_text="the pending or running job, if any")
    drawn_despite_problems = serializers.BooleanField(
        help_text="problems, yet drawn: the plan as if every NPU die were healthy (a die went bad since)")
    state_colours = serializers.DictField(child=serializers.CharField())
    role_colours = serializers.DictField(child=serializers.CharField())
    kv_mesh = TopologyKvMeshSerializer(allow_null=True)
    live = TopologyLiveRoundSerializer(allow_null=True, help_text="the last scrape round; null when none lately")
