"""The 30 s NPU telemetry over a real SSH server: readings refresh, every failure keeps the rows, no job rows."""

import pytest
from django.conf import settings
from django.test import Client

from apps.audit.models import AuditEntry
from apps.inventory.choices import Reachability
from apps.inventory.models import Node, Npu
from apps.inventory.npu_polling import npu_poll_round
from apps.inventory.services import node_discover
from apps.jobs.choices import JobStatus
from apps.jobs.models import Job
from apps.jobs.runner import run_job

pytestmark = [pytest.mark.procs, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _own_cache(own_cache_prefix):
    """The round's lock lives in Redis: a parallel run of this suite must not hold ours."""


@pytest.fixture
def discovered(sim_node, make_user):
    job = node_discover(sim_node, user=make_user("operator"))
    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL, job.explanation
    sim_node.refresh_from_db()
    return sim_node


def _rows(node):
    return list(Npu.objects.filter(node=node).order_by("logical_id")
                .values_list("logical_id", "hbm_used_mb", "health", "aicore_percent", "last_seen"))


def _sample(fake):
    return (fake.bin_dir / "info.txt").read_text()


def test_a_round_refreshes_hbm_health_and_last_seen_without_job_or_audit_rows(discovered, fake_npu_smi):
    before = {row[0]: row for row in _rows(discovered)}
    jobs, audits = Job.objects.count(), AuditEntry.objects.count()
    text = _sample(fake_npu_smi).replace("3186 / 65536", "41000 / 65536", 1)
    fake_npu_smi.prints(text=text.replace("| OK            |", "| Warning       |", 1))

    round_ = npu_poll_round()

    assert round_.polled == 1 and round_.refreshed_rows == 16 and not round_.failed
    die0 = Npu.objects.get(node=discovered, logical_id=0)
    assert die0.hbm_used_mb == 41000 and die0.health == "Warning"
    assert die0.last_seen > before[0][4]
    assert Npu.objects.get(node=discovered, logical_id=2).hbm_used_mb == before[2][1]
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.REACHABLE and discovered.reachability_detail == ""
    assert Job.objects.count() == jobs and AuditEntry.objects.count() == audits


def test_polling_never_adds_or_removes_dies(discovered, fake_npu_smi):
    fake_npu_smi.prints("full_910b_8npu_info.txt")  # other hardware now: that is for a discover job to record
    before = _rows(discovered)
    assert npu_poll_round().refreshed_rows == 1  # of the 910B's dies only logical 0 is still NPU 0 chip 0
    assert Npu.objects.filter(node=discovered).count() == 16
    assert _rows(discovered)[1:] == before[1:]


def test_damaged_output_keeps_rows_and_the_node_reachable(discovered, fake_npu_smi):
    before = _rows(discovered)
    lines = _sample(fake_npu_smi).splitlines()
    fake_npu_smi.prints(text="\n".join(lines[:12] + ["| garbage row |"] + lines[13:]))

    round_ = npu_poll_round()

    assert "cannot parse" in round_.failed["disc0"]
    assert _rows(discovered) == before  # not even last_seen: the readings really are old
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.REACHABLE  # SSH answered: not unreachable, never unknown
    assert "cannot parse `npu-smi info`" in discovered.reachability_detail


def test_failing_npu_smi_keeps_rows(discovered, fake_npu_smi):
    before = _rows(discovered)
    fake_npu_smi.prints(text="dcmi model initialized failed. ret is -8020\n", exit_code=255)
    npu_poll_round()
    assert _rows(discovered) == before
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.REACHABLE and "-8020" in discovered.reachability_detail


def test_changed_host_key_marks_the_node_touches_no_rows_and_stops_polling_it(discovered):
    from tests.keys import generate_key_pair

    before = _rows(discovered)
    Node.objects.filter(pk=discovered.pk).update(host_key=generate_key_pair()[1])

    round_ = npu_poll_round()

    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.HOST_KEY_MISMATCH
    assert "SHA256:" in discovered.reachability_detail and "disc0" in round_.failed
    assert _rows(discovered) == before
    assert npu_poll_round().polled == 0  # an operator pins the new key and discovers again


def test_unreachable_node_is_marked_and_polled_again_until_it_answers(discovered):
    before = _rows(discovered)
    Node.objects.filter(pk=discovered.pk).update(address="127.0.10.189")  # nothing listens there

    npu_poll_round()
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.UNREACHABLE and "127.0.10.189" in discovered.reachability_detail
    assert _rows(discovered) == before

    Node.objects.filter(pk=discovered.pk).update(address="127.0.10.171")
    assert npu_poll_round().refreshed_rows == 16
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.REACHABLE


def test_nodes_without_pinned_key_or_npus_or_discovery_are_skipped(discovered):
    Node.objects.filter(pk=discovered.pk).update(host_key="")
    assert npu_poll_round().polled == 0
    Node.objects.filter(pk=discovered.pk).update(host_key=discovered.host_key, npu_count=0)
    assert npu_poll_round().polled == 0
    Node.objects.filter(pk=discovered.pk).update(npu_count=16, reachability=Reachability.UNKNOWN)
    assert npu_poll_round().polled == 0
    discovered.refresh_from_db()
    assert discovered.reachability == Reachability.UNKNOWN  # skipped nodes are not touched at all


def test_a_round_still_running_makes_the_next_one_a_no_op(discovered):
    from django.core.cache import cache

    from apps.inventory.npu_polling import LOCK

    cache.add(LOCK, 1, timeout=30)
    try:
        assert npu_poll_round().skipped
    finally:
        cache.delete(LOCK)


def test_the_task_is_on_the_beat_every_30_s_on_the_telemetry_queue(discovered):
    from apps.inventory.tasks import poll_npus_task

    entry = settings.CELERY_BEAT_SCHEDULE["poll-npus"]
    assert entry["task"] == "apps.inventory.tasks.poll_npus_task" and entry["schedule"] == 30.0
    assert settings.CELERY_TASK_ROUTES["apps.inventory.tasks.*"]["queue"] == f"{settings.PDCP_NAMESPACE}.telemetry"
    assert poll_npus_task() == 16


def test_node_page_polls_its_tiles_and_the_partial_shows_fresh_readings(discovered, make_user):
    Npu.objects.filter(node=discovered, logical_id=0).update(hbm_used_mb=12345)
    viewer = Client()
    viewer.force_login(make_user("viewer"))

    page = viewer.get(f"/nodes/{discovered.pk}/").content.decode()
    assert f'hx-get="/nodes/{discovered.pk}/npus/"' in page and 'hx-trigger="every 15s"' in page

    partial = viewer.get(f"/nodes/{discovered.pk}/npus/")
    assert partial.status_code == 200
    html = partial.content.decode()
    assert 'id="npu-grid"' in html and "HBM 12345 / 65536 MB" in html and "<html" not in html
    assert html.count('class="npu-tile') == 16

    nobody = Client()
    nobody.force_login(make_user(None))
    assert nobody.get(f"/nodes/{discovered.pk}/npus/").status_code == 403
