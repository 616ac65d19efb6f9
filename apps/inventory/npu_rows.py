"""Storing what `npu-smi info` said about a node's NPU dies: the discover job and the telemetry poll both write here."""

from django.db import transaction
from django.utils import timezone

from .choices import NpuHealth
from .models import Node, Npu
from .npu_smi import NpuSmiInfo

HEALTH_RANK = {NpuHealth.OK: 0, NpuHealth.WARNING: 1, NpuHealth.ALARM: 2, NpuHealth.CRITICAL: 3}


def npu_health_normal(value: str) -> NpuHealth:
    for choice in NpuHealth:
        if choice.value.lower() == str(value).strip().lower():
            return choice
    return NpuHealth.UNKNOWN


def _worse(a: NpuHealth, b: NpuHealth) -> NpuHealth:
    return a if HEALTH_RANK.get(a, -1) >= HEALTH_RANK.get(b, -1) else b


def npu_rows_store(node: Node, info: NpuSmiInfo, health: dict[int, str] | None = None, *,
                   refresh_only: bool = False) -> int:
    """Writes the parsed dies onto the node's Npu rows; returns how many rows were written.

    `health` (per NPU id, from the per-NPU health query) may only make a die's table health worse.
    `refresh_only` is the poll: it updates the readings of rows discovery already made and never creates or
    deletes one (which dies a node has is the discover job's business, which also records it in a job).
    """
    now = timezone.now()
    health = health or {}
    written = 0
    with transaction.atomic():
        kept = []
        for die in info.dies:
            state = _worse(npu_health_normal(die.health), npu_health_normal(health.get(die.npu_id, die.health)))
            readings = dict(health=state, hbm_used_mb=die.hbm_used_mb, hbm_total_mb=die.hbm_total_mb,
                            aicore_percent=die.aicore_percent, power_w=die.power_w, temperature_c=die.temp_c,
                            last_seen=now)
            if refresh_only:
                # A die whose identity moved (other hardware now) stays stale until a discover records it.
                written += Npu.objects.filter(node=node, logical_id=die.logical_id, npu_id=die.npu_id,
                                              chip_id=die.chip_id).update(**readings)
                continue
            npu, _ = Npu.objects.update_or_create(
                node=node, logical_id=die.logical_id,
                defaults=dict(npu_id=die.npu_id, chip_id=die.chip_id, phy_id=die.phy_id, name=die.name,
                              bus_id=die.bus_id, **readings),
            )
            kept.append(npu.pk)
        if refresh_only:
            return written
        Npu.objects.filter(node=node).exclude(pk__in=kept).delete()
        if info.dies and not node.npu_model:
            Node.objects.filter(pk=node.pk).update(npu_model=info.dies[0].name)
    return len(kept)
