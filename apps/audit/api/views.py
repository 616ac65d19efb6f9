import django_filters
from rest_framework import serializers, viewsets

from ..models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "time", "username", "action", "object_type", "object_id", "object_repr", "changes"]


class AuditEntryFilterSet(django_filters.FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="gte")

    class Meta:
        model = AuditEntry
        fields = ["username", "action", "object_type", "object_id"]


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
