"""The audit trail page."""

from django.core.paginator import Paginator
from django.shortcuts import render

from apps.accounts.access import viewer_required

from .models import AuditEntry


@viewer_required
def audit_list(request):
    page = Paginator(AuditEntry.objects.all(), 50).get_page(request.GET.get("page"))
    return render(request, "audit/audit_list.html", {"page": page})
