"""Inventory filters, and IdOrNameFilter, which the other apps' filtersets use for `?cluster=reference` as well as
`?cluster=1`."""

import django_filters

from ..choices import NpuHealth, Reachability
from ..models import Cluster, Node, Npu


class IdOrNameFilter(django_filters.CharFilter):
    """A related object by id (all digits) or by name, any case: `?cluster=1` or `?cluster=reference`."""

    def __init__(self, *args, name_field: str = "name", **kwargs):
        self.name_field = name_field
        kwargs.setdefault("help_text", "id or name (any case)")
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        if value in django_filters.constants.EMPTY_VALUES:
            return qs
        value = value.strip()
        if value.isdecimal():
            return qs.filter(**{self.field_name: int(value)})
        return qs.filter(**{f"{self.field_name}__{self.name_field}__iexact": value})


class ClusterFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact", help_text="exact, any case (?search= for a part)")

    class Meta:
        model = Cluster
        fields = ["name"]


class NodeFilterSet(django_filters.FilterSet):
    cluster = IdOrNameFilter(field_name="cluster")
    cluster_name = django_filters.CharFilter(field_name="cluster__name", lookup_expr="iexact")
    name = django_filters.CharFilter(lookup_expr="iexact", help_text="exact, any case (?search= for a part)")
    reachability = django_filters.ChoiceFilter(choices=Reachability.choices)
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
    node = IdOrNameFilter(field_name="node")
    node_name = django_filters.CharFilter(field_name="node__name", lookup_expr="iexact")
    cluster = IdOrNameFilter(field_name="node__cluster")
    health = django_filters.ChoiceFilter(choices=NpuHealth.choices)

    class Meta:
        model = Npu
        fields = ["node", "health", "npu_id", "logical_id"]
