"""Operator pages: thin views over services and selectors; every failure is shown in place."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.access import admin_required, operator_required, viewer_required
from apps.audit.models import AuditEntry
from apps.inventory.downloads import inventory_download
from apps.inventory.inventory_file import InventoryFileInvalid
from apps.inventory.models import Cluster, Node
from apps.inventory.selectors import clusters_with_counts, nodes_of_cluster
from apps.inventory.services import (
    HostKeyNotConfirmed,
    inventory_import,
    node_discover,
    node_fetch_host_key,
    node_pin_host_key,
)
from apps.jobs.models import Job
from apps.jobs.services import JobStateError, job_cancel


@viewer_required
def dashboard(request):
    return render(request, "ui/dashboard.html", {
        "clusters": clusters_with_counts(),
        "jobs": Job.objects.select_related("created_by")[:10],
    })


@viewer_required
def cluster_detail(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    return render(request, "ui/cluster_detail.html", {"cluster": cluster, "nodes": nodes_of_cluster(cluster)})


@viewer_required
def node_detail(request, pk):
    node = get_object_or_404(Node.objects.select_related("cluster", "credential"), pk=pk)
    jobs = Job.objects.filter(target_type="inventory.node", target_id=node.pk)[:5]
    return render(request, "ui/node_detail.html", {"node": node, "npus": node.npus.all(), "jobs": jobs})


@viewer_required
def node_npus(request, pk):
    """The node page's NPU tiles alone, for its 15 s poll."""
    node = get_object_or_404(Node, pk=pk)
    return render(request, "ui/_npu_grid.html", {"node": node, "npus": node.npus.all()})


@require_POST
@operator_required
def node_discover_action(request, pk):
    node = get_object_or_404(Node.objects.select_related("cluster"), pk=pk)
    job = node_discover(node, user=request.user)
    return redirect("ui:job", pk=job.pk)


@require_POST
@operator_required
def cluster_discover_action(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    nodes = list(cluster.nodes.select_related("cluster").exclude(npu_count=0))
    for node in nodes:
        node_discover(node, user=request.user)
    messages.success(request, f"discovery started on {len(nodes)} nodes")
    return redirect("ui:cluster", pk=cluster.pk)


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
            return redirect("ui:node-host-key", pk=node.pk)
        messages.success(request, "host key pinned")
        return redirect("ui:node", pk=node.pk)
    try:
        presented = node_fetch_host_key(node)
        error = None
    except SshError as exc:
        presented, error = None, str(exc)
    return render(request, "ui/node_host_key.html", {"node": node, "presented": presented, "error": error})


@viewer_required
def job_list(request):
    page = Paginator(Job.objects.select_related("created_by"), 50).get_page(request.GET.get("page"))
    return render(request, "ui/job_list.html", {"page": page})


@viewer_required
def job_detail(request, pk):
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=pk)
    return render(request, "ui/job_detail.html", {"job": job, "summaries": job.node_summaries.all()})


@require_POST
@operator_required
def job_cancel_action(request, pk):
    job = get_object_or_404(Job, pk=pk)
    try:
        job_cancel(job, user=request.user)
        messages.info(request, "cancel requested")
    except JobStateError as exc:
        messages.error(request, str(exc))
    return redirect("ui:job", pk=job.pk)


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
    return render(request, "ui/inventory_import.html", {"errors": errors, "result": result}, status=400 if errors else 200)


@viewer_required
def inventory_export_download(request):
    return inventory_download(request.GET.get("as", "yaml"))


@viewer_required
def audit_list(request):
    page = Paginator(AuditEntry.objects.all(), 50).get_page(request.GET.get("page"))
    return render(request, "ui/audit_list.html", {"page": page})
