import django_filters

from ..models import Node, Npu


class NodeFilterSet(django_filters.FilterSet):
    cluster_name = django_filters.CharFilter(field_name="cluster__name")
    label = django_filters.CharFilter(method="filter_label", help_text="key=value")

    class Meta:
        model = Node
        fields = ["cluster", "name", "address", "reachability", "hardware_model", "npu_model"]

    def filter_label(self, queryset, name, value):
        key, _, wanted = value.partition("=")
        matching = [pk for pk, labels in queryset.values_list("pk", "labels")
                    if isinstance(labels, dict) and str(labels.get(key, "")) == wanted]
        return queryset.filter(pk__in=matching)


class NpuFilterSet(django_filters.FilterSet):
    node_name = django_filters.CharFilter(field_name="node__name")
    cluster = django_filters.NumberFilter(field_name="node__cluster")

    class Meta:
        model = Npu
        fields = ["node", "health", "npu_id", "logical_id"]
