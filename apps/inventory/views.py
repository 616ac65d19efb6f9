"""Inventory pages: clusters, nodes with their NPU dies and host keys, and the inventory import and export."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import admin_required, operator_required, viewer_required
from apps.jobs.models import Job

from .downloads import inventory_download
from .inventory_file import InventoryFileInvalid
from .models import Cluster, Node
from .selectors import nodes_of_cluster
from .services import (
    HostKeyNotConfirmed,
    inventory_import,
    node_discover,
    node_fetch_host_key,
    node_pin_host_key,
)


@viewer_required
def cluster_detail(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    return render(request, "inventory/cluster_detail.html", {"cluster": cluster, "nodes": nodes_of_cluster(cluster)})


@viewer_required
def node_detail(request, pk):
    node = get_object_or_404(Node.objects.select_related("cluster", "credential"), pk=pk)
    jobs = Job.objects.filter(target_type="inventory.node", target_id=node.pk)[:5]
    return render(request, "inventory/node_detail.html", {"node": node, "npus": node.npus.all(), "jobs": jobs})


@viewer_required
def node_npus(request, pk):
    """The node page's NPU tiles alone, for its 15 s poll."""
    node = get_object_or_404(Node, pk=pk)
    return render(request, "inventory/_npu_grid.html", {"node": node, "npus": node.npus.all()})


@require_POST
@operator_required
def node_discover_action(request, pk):
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    job = node_discover(node, user=request.user)
    return redirect("jobs:detail", pk=job.pk)


@require_POST
@operator_required
def cluster_discover_action(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    nodes = list(cluster.nodes.select_related("cluster").exclude(npu_count=0))
    for node in nodes:
        node_discover(node, user=request.user)
    messages.success(request, f"discovery started on {len(nodes)} nodes")
    return redirect("inventory:cluster", pk=cluster.pk)


@admin_required
def node_host_key(request, pk):
    from sshexec import SshError

    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    if request.method == "POST":
        try:
            node_pin_host_key(node, host_key=request.POST.get("host_key", ""),
                              fingerprint=request.POST.get("fingerprint", ""))
        except (HostKeyNotConfirmed, ValidationError) as exc:
            messages.error(request, f"host key not pinned: {'; '.join(getattr(exc, 'messages', [str(exc)]))}")
            return redirect("inventory:node-host-key", pk=node.pk)
        messages.success(request, "host key pinned")
        return redirect("inventory:node", pk=node.pk)
    try:
        presented = node_fetch_host_key(node)
        error = None
    except SshError as exc:
        presented, error = None, str(exc)
    return render(request, "inventory/node_host_key.html", {"node": node, "presented": presented, "error": error})


@admin_required
def inventory_import_page(request):
    errors, result = [], None
    if request.method == "POST":
        upload = request.FILES.get("file")
        text = request.POST.get("text", "")
        try:
            text = upload.read().decode("utf-8") if upload else text
            if not text.strip():
                errors = [{"line": 0, "field": "file", "message": "choose a file or paste its text"}]
            else:
                result = inventory_import(text)
                messages.success(request, "inventory imported: {clusters} clusters, {nodes_created} nodes created, "
                                          "{nodes_updated} updated, {credentials} credentials".format(**result))
                return redirect("ui:dashboard")
        except UnicodeDecodeError:
            errors = [{"line": 0, "field": "file", "message": "not UTF-8 text"}]
        except InventoryFileInvalid as exc:
            errors = [e.__dict__ for e in exc.errors]
    return render(request, "inventory/inventory_import.html", {"errors": errors, "result": result},
                  status=400 if errors else 200)


@viewer_required
def inventory_export_download(request):
    return inventory_download(request.GET.get("as", "yaml"))
