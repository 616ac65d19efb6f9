"""Discovery over a real SSH server: what is stored on success, and that every failure keeps what was stored."""

import pytest

from apps.inventory.choices import Reachability
from apps.inventory.models import Node, Npu
from apps.inventory.services import node_discover
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobEvent, JobNodeSummary
from apps.jobs.runner import run_job

pytestmark = [pytest.mark.procs, pytest.mark.django_db]


def discover(node, user):
    job = node_discover(node, user=user)
    run_job(job.pk)
    job.refresh_from_db()
    node.refresh_from_db()
    return job


@pytest.fixture
def operator(make_user):
    return make_user("operator")


def test_discovers_the_16_dies_of_an_a3(sim_node, operator):
    job = discover(sim_node, operator)
    assert job.status == JobStatus.SUCCESSFUL, job.explanation
    npus = list(Npu.objects.filter(node=sim_node).order_by("logical_id"))
    assert [n.logical_id for n in npus] == list(range(16))
    assert {n.npu_id for n in npus} == set(range(8))
    assert all(n.health == "OK" for n in npus)
    assert npus[0].hbm_total_mb == 65536 and npus[0].hbm_used_mb > 0
    assert npus[1].power_w is None  # die 1 of an A3 NPU reports no power
    assert sim_node.reachability == Reachability.REACHABLE and sim_node.last_seen is not None
    assert "16 NPU dies" in job.explanation
    assert JobEvent.objects.filter(job=job, text__contains="npu-smi info").exists()
    summary = JobNodeSummary.objects.get(job=job)
    assert summary.state == "done" and summary.percent == 100


def test_discovers_a_910b_and_replaces_rows_that_vanished(sim_node, operator, fake_npu_smi):
    discover(sim_node, operator)
    fake_npu_smi.prints("full_910b_8npu_info.txt")
    job = discover(sim_node, operator)
    assert job.status == JobStatus.SUCCESSFUL, job.explanation
    assert Npu.objects.filter(node=sim_node).count() == 8


def test_alarm_health_is_stored(sim_node, operator, fake_npu_smi):
    fake_npu_smi.prints("full_a3_16die_info.txt", health="health_alarm.txt")
    job = discover(sim_node, operator)
    assert job.status == JobStatus.SUCCESSFUL
    assert Npu.objects.filter(node=sim_node, health="Alarm").count() == 16


def test_health_query_of_one_npu_marks_both_its_dies(sim_node, operator, fake_npu_smi):
    fake_npu_smi.npu_health(3, "health_alarm.txt")
    job = discover(sim_node, operator)
    assert job.status == JobStatus.SUCCESSFUL
    alarmed = Npu.objects.filter(node=sim_node, health="Alarm")
    assert sorted(alarmed.values_list("logical_id", flat=True)) == [6, 7]
    assert JobEvent.objects.filter(job=job, text__startswith="$ npu-smi info -t health -i N").count() == 1


def _stored(node):
    return list(Npu.objects.filter(node=node).order_by("logical_id").values_list("logical_id", "hbm_used_mb", "health"))


def test_unparsable_output_fails_with_the_line_and_keeps_stored_npus(sim_node, operator, fake_npu_smi):
    discover(sim_node, operator)
    before = _stored(sim_node)
    sample = (fake_npu_smi.bin_dir / "info.txt").read_text().splitlines()
    fake_npu_smi.prints(text="\n".join(sample[:12] + ["| garbage row |"] + sample[13:]))
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "cannot parse `npu-smi info`" in job.explanation and "line" in job.explanation
    assert "stored NPUs left unchanged" in job.explanation
    assert _stored(sim_node) == before


def test_missing_npu_smi_is_a_clear_message(sim_node, operator, fake_npu_smi):
    fake_npu_smi.remove()
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "`npu-smi` is not installed or not on PATH" in job.explanation


def test_npu_smi_error_exit_shows_its_output(sim_node, operator, fake_npu_smi):
    fake_npu_smi.prints(text="dcmi model initialized failed, because the device is used. ret is -8020\n", exit_code=255)
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "exited 255" in job.explanation and "-8020" in job.explanation


def test_changed_host_key_fails_loudly_and_keeps_npus(sim_node, operator):
    from tests.keys import generate_key_pair

    discover(sim_node, operator)
    before = _stored(sim_node)
    Node.objects.filter(pk=sim_node.pk).update(host_key=generate_key_pair()[1])
    sim_node.refresh_from_db()
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "changed" in job.explanation and "SHA256:" in job.explanation
    assert sim_node.reachability == Reachability.HOST_KEY_MISMATCH
    assert _stored(sim_node) == before


def test_refused_auth_is_reported(sim_node, operator):
    from apps.inventory.services import credential_save
    from tests.keys import generate_key_pair

    credential_save(sim_node.credential, secret=generate_key_pair()[0])
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert sim_node.reachability == Reachability.AUTH_FAILED
    assert "simnode" in job.explanation
    assert "PRIVATE KEY" not in job.explanation


def test_unreachable_node_is_reported(sim_node, operator):
    Node.objects.filter(pk=sim_node.pk).update(address="127.0.10.189")  # nothing listens there
    sim_node.refresh_from_db()
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "127.0.10.189" in job.explanation
    assert sim_node.reachability == Reachability.UNREACHABLE


def test_node_without_pinned_key_is_never_contacted(sim_node, operator):
    Node.objects.filter(pk=sim_node.pk).update(host_key="")
    sim_node.refresh_from_db()
    job = discover(sim_node, operator)
    assert job.status == JobStatus.FAILED
    assert "no pinned host key" in job.explanation
    assert not JobEvent.objects.filter(job=job, text__startswith="connecting").exists()


def test_fetch_then_pin_host_key_through_the_api(sim_node, api_client_for, ssh_node):
    Node.objects.filter(pk=sim_node.pk).update(host_key="")
    admin = api_client_for("admin")
    fetched = admin.post(f"/api/nodes/{sim_node.pk}/fetch-host-key/").json()
    assert fetched["host_key"] == ssh_node.host_key_line
    assert fetched["fingerprint"].startswith("SHA256:") and fetched["pinned"] is False
    wrong = admin.post(f"/api/nodes/{sim_node.pk}/pin-host-key/",
                       {"host_key": fetched["host_key"], "fingerprint": "SHA256:not-it"}, format="json")
    assert wrong.status_code == 400
    sim_node.refresh_from_db()
    assert sim_node.host_key == ""
    ok = admin.post(f"/api/nodes/{sim_node.pk}/pin-host-key/",
                    {"host_key": fetched["host_key"], "fingerprint": fetched["fingerprint"]}, format="json")
    assert ok.status_code == 200
    sim_node.refresh_from_db()
    assert sim_node.host_key == ssh_node.host_key_line


def test_discover_command(sim_node, capsys):
    from django.core.management import call_command

    call_command("discover", "disc0", "--cluster", "sim")
    assert "16 NPU dies" in capsys.readouterr().out
    assert Npu.objects.filter(node=sim_node).count() == 16
