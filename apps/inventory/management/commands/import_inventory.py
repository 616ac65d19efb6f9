"""manage.py import_inventory FILE: apply an inventory file (YAML, or CSV of nodes) in one transaction."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from apps.inventory.inventory_file import InventoryFileInvalid
from apps.inventory.services import inventory_import


class Command(BaseCommand):
    help = "Import an inventory file. A file with any error changes nothing and every error is listed by line."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        try:
            counts = inventory_import(text, allow_key_files=True, base_dir=file.resolve().parent)
        except InventoryFileInvalid as exc:
            for error in exc.errors:
                self.stderr.write(f"{file}:{error.line}: {error.field}: {error.message}")
            raise CommandError(f"{file} rejected: {len(exc.errors)} error(s); nothing was changed") from exc
        self.stdout.write(self.style.SUCCESS(
            "imported {clusters} clusters, {nodes_created} nodes created, {nodes_updated} updated, "
            "{credentials} credentials".format(**counts)))
