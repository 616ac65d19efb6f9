"""The inventory as a file download (YAML, or nodes as CSV), shared by the API and the pages."""

import yaml
from django.http import HttpResponse

from .services import inventory_export, inventory_export_nodes_csv


def inventory_download(kind: str) -> HttpResponse:
    if kind == "csv":
        return HttpResponse(inventory_export_nodes_csv(), content_type="text/csv",
                            headers={"Content-Disposition": 'attachment; filename="nodes.csv"'})
    body = yaml.safe_dump(inventory_export(), sort_keys=False)
    return HttpResponse(body, content_type="application/yaml",
                        headers={"Content-Disposition": 'attachment; filename="inventory.yaml"'})
