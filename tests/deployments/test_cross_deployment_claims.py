"""Two deployments of one cluster never hold the same NPU dies or ports (apps/deployments/claims.py): a revision
that would take what another deployment's active revision, or a running process of one of its older revisions,
holds is refused, naming the deployment, the node, the dies or ports, and a concrete fix."""

from __future__ import annotations

from unittest import mock

import pytest

from apps.deployments import claims
from apps.deployments.inventory_lookup import cluster_facts
from apps.deployments.models import Process, Revision
from apps.deployments.revision_checks import RevisionInvalid, validate_spec
from apps.deployments.revision_plan import start_line
from apps.deployments.services import deployment_create, deployment_deploy, revision_create
from apps.deployments.topology import build_plan, spec_from_yaml
from apps.jobs.models import Job
from tests.deployments.second_site import on_new_nodes

pytestmark = pytest.mark.django_db

HALF = """launch_profile: vllm-ascend
run_dir: /var/lib/pdcp/{name}
model:
  path: /models/m
  served_name: m
  profile: {{layers: 2, kv_heads: 1, head_dim: 8, dtype: bfloat16, attention_heads: 16}}
instances:
  - {{name: p0, role: prefill, node: {p_node}, tp: 8, devices: {p_devices}, api_port: {p_api}, kv_port: {p_kv}}}
  - {{name: d0, role: decode, node: {d_node}, tp: 4, dp: 2, dp_rpc_port: 12321, api_port: 7100, kv_port: 30200}}
proxy: {{node: proxy, port: {proxy_port}}}
"""


def half(name, *, p_node="node0", p_devices="[0, 1, 2, 3, 4, 5, 6, 7]", p_api=7100, p_kv=30000, d_node="node1",
         proxy_port=1999) -> str:
    """A small topology: p0 on eight dies of p_node, d0 (DP2 x TP4) on d_node's first free dies."""
    return HALF.format(name=name, p_node=p_node, p_devices=p_devices, p_api=p_api, p_kv=p_kv, d_node=d_node,
                       proxy_port=proxy_port)


def problems_of(**kwargs) -> list:
    with pytest.raises(RevisionInvalid) as caught:
        deployment_create(user=None, **kwargs)
    return caught.value.problems


def test_a_copy_of_the_reference_on_its_nodes_is_refused_naming_deployment_node_and_dies(api_client_for,
                                                                                        deployment, fixed_yaml,
                                                                                        ref_cluster):
    # `reference` never ran (no process rows): its active revision alone claims the dies and ports.
    copy = fixed_yaml.replace("/var/lib/pdcp/reference", "/var/lib/pdcp/copy")
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "copy", "cluster": ref_cluster.pk, "yaml_text": copy}, format="json")
    assert response.status_code == 400
    body = response.content.decode()
    assert "p0 on node0 uses NPU dies 0-15, which deployment reference already claims there" in body
    assert "proxy port 1999 on proxy (127.0.10.234) collides with deployment reference" in body
    assert "d0 API ports 7100-7103 on node2" in body and "d0-dp3 port 7103" in body
    assert "kv_pool.rpc_port" in body and "mooncake_master rpc port 50088" in body
    problems = {p.path: p for p in problems_of(name="copy2", cluster=ref_cluster, yaml_text=copy)}
    assert {"instances[0].devices", "instances[3].devices", "instances[2].kv_port", "instances[2].dp_rpc_port",
            "proxy.port", "proxy.admin_port", "kv_pool.metrics_port"} <= set(problems)
    # Every die of the cluster is taken: the fix says what would free them.
    assert "give deployment reference other dies, or delete it first" in problems["instances[0].devices"].suggestion
    assert problems["proxy.port"].suggestion == "set proxy.port to 2001 (free on proxy)"
    assert problems["instances[2].kv_port"].suggestion == "set d0's kv_port to 30216 (free on node2)"


def test_the_suggested_dies_and_ports_are_free_and_then_it_saves(ref_cluster):
    deployment_create(name="left", cluster=ref_cluster, user=None, yaml_text=half("left"))
    mine = half("right", p_devices="null", d_node="node3", proxy_port=2999)
    problems = {p.path: p for p in problems_of(name="right", cluster=ref_cluster, yaml_text=mine)}
    assert set(problems) == {"instances[0].devices", "instances[0].api_port", "instances[0].kv_port"}
    dies = problems["instances[0].devices"]
    assert "p0 on node0 uses NPU dies 0-7, which deployment left already claims there: its p0 dies 0-7 " \
           "(active revision r1)" in dies.message
    assert dies.suggestion == "use devices 8-15 on node0: devices: [8, 9, 10, 11, 12, 13, 14, 15]"
    assert problems["instances[0].api_port"].suggestion == "set p0's api_port to 7101 (free on node0)"
    assert "its p0-dp0 kv window 30000-30007" in problems["instances[0].kv_port"].message
    assert problems["instances[0].kv_port"].suggestion == "set p0's kv_port to 30008 (free on node0)"

    fixed = half("right", p_devices="[8, 9, 10, 11, 12, 13, 14, 15]", p_api=7101, p_kv=30008, d_node="node3",
                 proxy_port=2999)
    assert deployment_create(name="right", cluster=ref_cluster, user=None, yaml_text=fixed).active_revision


def test_a_full_node_is_moved_to_a_free_one(ref_cluster):
    deployment_create(name="left", cluster=ref_cluster, user=None, yaml_text=half("left"))
    deployment_create(name="middle", cluster=ref_cluster, user=None,
                      yaml_text=half("middle", p_devices="[8, 9, 10, 11, 12, 13, 14, 15]", p_api=7200, p_kv=31000,
                                     d_node="node2", proxy_port=2999))
    problems = problems_of(name="third", cluster=ref_cluster,
                           yaml_text=half("third", p_api=7300, p_kv=32000, d_node="node3", proxy_port=3999))
    assert [p.path for p in problems] == ["instances[0].devices"]
    assert "which deployment left already claims there" in problems[0].message
    # node1's d0 of left took dies 0-7: node1 has 8-15 free, node2 (middle's d0) too, node3 is this spec's d0's
    assert problems[0].suggestion == "move p0 to node1 (node: node1) with devices: [8, 9, 10, 11, 12, 13, 14, 15], " \
                                     "free there"


def test_a_deployment_never_conflicts_with_its_own_revisions(deployment, fixed_yaml):
    again = revision_create(deployment=deployment, user=None, yaml_text=fixed_yaml.replace("max_num_seqs: 8",
                                                                                           "max_num_seqs: 4"))
    Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="node0",
                           role="prefill", instance="p0", key="p0-dp0", address="127.0.10.230", ports=[7100],
                           command="ASCEND_RT_VISIBLE_DEVICES=0,1 vllm", fingerprint="x", log_path="/l",
                           pid_file="/p", state="running")
    assert validate_spec(spec_from_yaml(fixed_yaml), cluster=deployment.cluster, deployment_id=deployment.pk) == []
    assert deployment_deploy(deployment=deployment, user=None) and again.number == 2


def test_running_processes_of_an_older_revision_claim_until_they_stop(ref_cluster):
    old_yaml = half("left")
    left = deployment_create(name="left", cluster=ref_cluster, user=None, yaml_text=old_yaml)
    r1 = left.active_revision
    facts = cluster_facts(ref_cluster, launch_profile="vllm-ascend")
    p0 = next(p for p in build_plan(spec_from_yaml(old_yaml), facts).processes if p.key == "p0-dp0")
    Process.objects.create(deployment=left, revision=r1, node_name=p0.node, role=p0.role, instance="p0", key=p0.key,
                           address=p0.address, ports=list(p0.ports), command=start_line(p0), fingerprint="x",
                           log_path="/l", pid_file="/p", state="running")
    # r2 moves p0 to dies 8-15 and other ports; r1's p0 still runs on 0-7 (no deploy yet).
    revision_create(deployment=left, user=None, activate=True, yaml_text=half(
        "left", p_devices="[8, 9, 10, 11, 12, 13, 14, 15]", p_api=7150, p_kv=30500))
    mine = half("right", d_node="node3", proxy_port=2999)
    problems = {p.path: p for p in problems_of(name="right", cluster=ref_cluster, yaml_text=mine)}
    assert set(problems) == {"instances[0].devices", "instances[0].api_port", "instances[0].kv_port"}
    assert "its p0-dp0 dies 0-7 (running, started from r1)" in problems["instances[0].devices"].message
    assert "its p0-dp0 port 7100 (running, started from r1)" in problems["instances[0].api_port"].message
    assert "its p0-dp0 kv window 30000-30007 (running, started from r1)" in problems["instances[0].kv_port"].message

    Process.objects.filter(deployment=left).update(state="stopped")
    assert deployment_create(name="right", cluster=ref_cluster, user=None, yaml_text=mine)


def test_an_active_revision_that_no_longer_validates_is_skipped_but_its_processes_count(ref_cluster):
    left = deployment_create(name="left", cluster=ref_cluster, user=None, yaml_text=half("left"))
    revision = left.active_revision
    broken = {**revision.spec, "instances": [{**i, "node": "gone"} for i in revision.spec["instances"]]}
    Revision.objects.filter(pk=revision.pk).update(spec=broken)  # as if node0 and node1 left the inventory
    mine = half("right", proxy_port=2999)
    assert validate_spec(spec_from_yaml(mine), cluster=ref_cluster) == []

    Process.objects.create(deployment=left, revision=revision, node_name="node0", role="prefill", instance="p0",
                           key="p0-dp0", address="127.0.10.230", ports=[7100],
                           command="... 'ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7' vllm serve ...",
                           fingerprint="x", log_path="/l", pid_file="/p", state="unknown")
    problems = validate_spec(spec_from_yaml(mine), cluster=ref_cluster)
    assert [p.path for p in problems] == ["instances[0].devices", "instances[0].api_port", "instances[0].kv_port"]
    assert "its p0-dp0 dies 0-7 (state unknown, started from r1)" in problems[0].message


def test_a_deploy_that_now_collides_is_refused_before_any_job_exists(ref_cluster):
    from apps.inventory.models import Node, Npu

    # left takes node0's first free dies (0-7); right names 8-15. Then die 2 of node0 goes bad: left's p0 would
    # now get 0, 1, 3-8, and 8 is right's.
    left = deployment_create(name="left", cluster=ref_cluster, user=None, yaml_text=half("left", p_devices="null"))
    deployment_create(name="right", cluster=ref_cluster, user=None, yaml_text=half(
        "right", p_devices="[8, 9, 10, 11, 12, 13, 14, 15]", p_api=7200, p_kv=31000, d_node="node3",
        proxy_port=2999))
    node0 = Node.objects.get(cluster=ref_cluster, name="node0")
    for i in range(16):
        Npu.objects.create(node=node0, npu_id=i // 2, chip_id=i % 2, logical_id=i, name="910",
                           health="Critical" if i == 2 else "OK")
    with pytest.raises(RevisionInvalid) as caught:
        deployment_deploy(deployment=left, user=None)
    assert "p0 on node0 uses NPU dies 8, which deployment right already claims there" in str(caught.value)
    assert not Job.objects.exists()


def test_queries_and_renders_do_not_grow_with_the_other_deployments(ref_cluster, fixed_yaml,
                                                                     django_assert_num_queries):
    def add(k):
        d = deployment_create(name=f"other{k}", cluster=ref_cluster, user=None,
                              yaml_text=on_new_nodes(ref_cluster, fixed_yaml, k).replace("/reference", f"/o{k}"))
        Process.objects.create(deployment=d, revision=d.active_revision, node_name=f"node{4 * k}", role="prefill",
                               instance="p0", key="p0-dp0", address="x", ports=[7100], command="x", fingerprint="x",
                               log_path="/l", pid_file="/p", state="running")

    def check():
        with mock.patch.object(claims, "build_plan", wraps=build_plan) as renders:
            assert validate_spec(spec, cluster=ref_cluster) == []
        return renders.call_count

    spec = spec_from_yaml(fixed_yaml.replace("/reference", "/mine"))
    add(1)
    with django_assert_num_queries(4) as one:  # nodes + dies, the others' active revisions, their processes
        assert check() == 1
    add(2)
    add(3)
    with django_assert_num_queries(len(one.captured_queries)):
        assert check() == 3
