"""Re-encrypts every EncryptedTextField of every model with the first PDCP_SECRETS_KEY, in one transaction.

The fields are found by type, so a new encrypted field is rotated without being listed here. A value no
configured key opens is left exactly as stored and reported: re-enter it, or add its old key and run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.apps import apps
from django.db import transaction

from .secrets import EncryptedTextField, is_undecryptable


@dataclass
class FieldRotation:
    label: str  # app_label.model.field
    reencrypted: int = 0
    undecryptable: list[str] = field(default_factory=list)  # "id 7 (lab)"


def encrypted_fields():
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if isinstance(f, EncryptedTextField):
                yield model, f


def secrets_rotate() -> list[FieldRotation]:
    report = []
    with transaction.atomic():
        for model, f in encrypted_fields():
            rotation = FieldRotation(f"{model._meta.label_lower}.{f.name}")
            has_name = any(x.name == "name" for x in model._meta.concrete_fields)
            columns = ("pk", f.attname, "name") if has_name else ("pk", f.attname)
            rows = model._base_manager.select_for_update().order_by("pk").values_list(*columns)
            for pk, value, *name in rows:
                if not value:
                    continue
                if is_undecryptable(value):
                    rotation.undecryptable.append(f"id {pk}" + (f" ({name[0]})" if name else ""))
                    continue
                # update() writes through get_prep_value: encrypted again, with the first key. No save signals:
                # the secret itself did not change, so nothing is audited.
                model._base_manager.filter(pk=pk).update(**{f.attname: value})
                rotation.reencrypted += 1
            report.append(rotation)
    return report
