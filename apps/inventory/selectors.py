"""Inventory reads for pages and the API: a constant number of queries whatever the size."""

from django.db.models import Count, Q

from .models import Cluster, Node


def clusters_with_counts():
    return Cluster.objects.annotate(
        node_count=Count("nodes", distinct=True),
        npu_count=Count("nodes__npus", distinct=True),
        npu_unhealthy=Count("nodes__npus", filter=~Q(nodes__npus__health="OK"), distinct=True),
        nodes_down=Count("nodes", filter=Q(nodes__reachability__in=["unreachable", "auth_failed",
                                                                     "host_key_mismatch"]), distinct=True),
    ).order_by("name")


def nodes_of_cluster(cluster):
    return (Node.objects.filter(cluster=cluster).select_related("credential")
            .annotate(npu_total=Count("npus"), npu_unhealthy=Count("npus", filter=~Q(npus__health="OK")))
            .order_by("name"))
