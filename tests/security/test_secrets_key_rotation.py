"""PDCP_SECRETS_KEY: validated at start-up, several keys for rotation, `manage.py rotate_secrets`, and a secret no
key opens shown as a state on its object instead of a 500 (issue 8)."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from apps.deployments.choices import ProcessState
from apps.deployments.models import Deployment, Process
from apps.inventory.choices import Reachability
from apps.inventory.models import Node, SshCredential
from apps.inventory.npu_polling import npu_poll_round
from apps.inventory.secrets import UNDECRYPTABLE
from apps.inventory.services import credential_save
from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from tests.keys import TEST_HOST_KEY, TEST_PRIVATE_KEY

ROOT = Path(__file__).resolve().parents[2]


def manage_check(tmp_path, secrets_key: str):
    env = {k: v for k, v in os.environ.items() if k not in ("PDCP_SECRETS_KEY", "DATABASE_URL", "PDCP_MODE")}
    env.update(PDCP_SECRETS_KEY=secrets_key, DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
               PDCP_DATA_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.procs
def test_a_malformed_key_stops_start_up_naming_the_setting_but_not_the_key(tmp_path):
    bad = "not-a-fernet-key-0123456789"
    result = manage_check(tmp_path, bad)
    assert result.returncode != 0
    assert "PDCP_SECRETS_KEY: the key is not a valid Fernet key" in result.stderr
    assert bad not in result.stderr + result.stdout
    good = Fernet.generate_key().decode()
    result = manage_check(tmp_path, f"{good},{bad}")
    assert result.returncode != 0 and "PDCP_SECRETS_KEY: key 2 of 2 is not a valid Fernet key" in result.stderr
    assert bad not in result.stderr and good not in result.stderr


@pytest.mark.procs
def test_several_keys_pass_start_up(tmp_path):
    keys = f"{Fernet.generate_key().decode()}, {Fernet.generate_key().decode()}"
    result = manage_check(tmp_path, keys)
    assert result.returncode == 0, result.stderr


def raw(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])  # noqa: S608  (names are ours)
        return cursor.fetchone()[0]


@pytest.fixture
def stored_under_old_key(db, use_keys, old_key, cluster):
    """A credential, a node using it and a deployment, all encrypted with old_key."""
    use_keys(old_key)
    cred = credential_save(SshCredential(name="lab", username="simnode"), secret=TEST_PRIVATE_KEY)
    node = Node.objects.create(cluster=cluster, name="n0", address="127.0.0.1", ssh_port=1, credential=cred,
                               host_key=TEST_HOST_KEY, npu_count=16, reachability=Reachability.REACHABLE)
    deployment = Deployment.objects.create(name="dep", cluster=cluster)
    return SimpleNamespace(credential=cred, node=node, deployment=deployment, token=deployment.proxy_admin_token)


@pytest.mark.django_db
def test_the_new_key_first_and_the_old_after_it_reads_everything_and_rotate_moves_it_to_the_new_key(
        stored_under_old_key, use_keys, old_key, new_key):
    s = stored_under_old_key
    use_keys(new_key, old_key)
    assert SshCredential.objects.get(pk=s.credential.pk).secret == TEST_PRIVATE_KEY
    out = StringIO()
    call_command("rotate_secrets", stdout=out)
    assert "inventory.sshcredential.secret: 1 re-encrypted with the first key" in out.getvalue()
    assert "deployments.deployment.proxy_admin_token: 1 re-encrypted with the first key" in out.getvalue()
    new = Fernet(new_key.encode())
    assert new.decrypt(raw("inventory_sshcredential", "secret", s.credential.pk).encode()).decode() == TEST_PRIVATE_KEY
    assert new.decrypt(raw("deployments_deployment", "proxy_admin_token", s.deployment.pk).encode()).decode() == s.token

    use_keys(new_key)  # the old key can go now
    assert SshCredential.objects.get(pk=s.credential.pk).secret == TEST_PRIVATE_KEY
    assert Deployment.objects.get(pk=s.deployment.pk).proxy_admin_token == s.token


@pytest.mark.django_db
def test_rotate_reports_what_it_cannot_decrypt_and_leaves_it_as_stored(stored_under_old_key, use_keys, new_key):
    s = stored_under_old_key
    before = raw("inventory_sshcredential", "secret", s.credential.pk)
    use_keys(new_key)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="2 stored secret"):
        call_command("rotate_secrets", stdout=out, stderr=err)
    assert f"inventory.sshcredential.secret id {s.credential.pk} (lab): {UNDECRYPTABLE}" in err.getvalue()
    assert "0 re-encrypted with the first key, 1 left as stored" in out.getvalue()
    assert raw("inventory_sshcredential", "secret", s.credential.pk) == before


@pytest.mark.django_db
def test_an_undecryptable_secret_is_a_state_on_its_objects_in_the_api_and_the_pages(
        stored_under_old_key, use_keys, new_key, api_client_for, make_user, django_user_model):
    s = stored_under_old_key
    use_keys(new_key)
    api = api_client_for("admin")
    listed = api.get("/api/credentials/")
    assert listed.status_code == 200
    assert listed.json()["results"][0]["secret_problem"] == UNDECRYPTABLE
    assert api.get(f"/api/nodes/{s.node.pk}/").status_code == 200
    dep = api.get(f"/api/deployments/{s.deployment.pk}/")
    assert dep.status_code == 200 and "cannot be decrypted with the current PDCP_SECRETS_KEY" in dep.json()["secret_problem"]
    assert api.get("/api/deployments/").status_code == 200

    browser = Client()
    browser.force_login(make_user("viewer", "watcher"))
    for url in (f"/nodes/{s.node.pk}/", "/deployments/", f"/deployments/{s.deployment.pk}/", "/"):
        page = browser.get(url)
        assert page.status_code == 200, url
    assert UNDECRYPTABLE in browser.get(f"/nodes/{s.node.pk}/").content.decode()
    assert "PDCP_SECRETS_KEY" in browser.get(f"/deployments/{s.deployment.pk}/").content.decode()

    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("boss", password="s3cret-pass-word"))
    page = admin.get(f"/admin/inventory/sshcredential/{s.credential.pk}/change/")
    assert page.status_code == 200 and UNDECRYPTABLE in page.content.decode()


@pytest.mark.django_db
def test_editing_an_undecryptable_credential_keeps_its_stored_secret_and_a_new_secret_fixes_it(
        stored_under_old_key, use_keys, new_key, api_client_for):
    s = stored_under_old_key
    before = raw("inventory_sshcredential", "secret", s.credential.pk)
    use_keys(new_key)
    api = api_client_for("admin")
    response = api.patch(f"/api/credentials/{s.credential.pk}/", {"username": "other"}, format="json")
    assert response.status_code == 200, response.content
    assert raw("inventory_sshcredential", "secret", s.credential.pk) == before

    response = api.patch(f"/api/credentials/{s.credential.pk}/", {"secret": TEST_PRIVATE_KEY}, format="json")
    assert response.status_code == 200 and response.json()["secret_problem"] == ""
    assert SshCredential.objects.get(pk=s.credential.pk).secret == TEST_PRIVATE_KEY


@pytest.mark.django_db
def test_ssh_refuses_to_use_an_undecryptable_secret_with_the_reason(stored_under_old_key, use_keys, new_key):
    use_keys(new_key)
    node = Node.objects.select_related("credential").get(pk=stored_under_old_key.node.pk)
    with pytest.raises(NodeNotReady, match="credential lab: secret cannot be decrypted"):
        ssh_target_for(node)


@pytest.mark.django_db
def test_npu_polling_skips_the_node_with_the_reason_instead_of_failing_the_round(stored_under_old_key, use_keys,
                                                                                  new_key):
    use_keys(new_key)
    round_ = npu_poll_round()
    assert not round_.skipped and round_.polled == 0
    assert UNDECRYPTABLE in round_.failed["n0"]


@pytest.mark.django_db
def test_telemetry_scrapes_a_deployment_whose_admin_token_cannot_be_decrypted(stored_under_old_key, use_keys,
                                                                               new_key):
    from apps.telemetry.services import scrape_running_deployments

    s = stored_under_old_key
    Process.objects.create(deployment=s.deployment, node=s.node, node_name="n0", role="proxy", key="proxy",
                           address="127.0.0.1", ports=[9], command="pdproxy", fingerprint="x", log_path="/tmp/l",
                           pid_file="/tmp/p", state=ProcessState.RUNNING)
    use_keys(new_key)

    def refused(url):
        raise ConnectionError("connection refused")

    states = scrape_running_deployments(fetch=refused)
    assert states[s.deployment.pk] is not None


@pytest.mark.django_db
def test_starting_the_proxy_replaces_an_undecryptable_admin_token(stored_under_old_key, use_keys, new_key):
    from apps.deployments.jobs.deployment_run import DeploymentRun

    s = stored_under_old_key
    use_keys(new_key)
    written, logged = {}, []
    run = DeploymentRun.__new__(DeploymentRun)
    run.deployment = Deployment.objects.get(pk=s.deployment.pk)
    run.spec = SimpleNamespace(run_dir="/var/lib/pdcp/dep")
    run.ctx = SimpleNamespace(log=lambda text, **kw: logged.append(text))
    run.fleet = SimpleNamespace(run=lambda node, cmd, timeout: SimpleNamespace(ok=True, stderr=""),
                                put_text=lambda node, path, text, mode: written.update({path: text}))
    run.write_admin_token("proxy")

    token = Deployment.objects.get(pk=s.deployment.pk).proxy_admin_token
    assert isinstance(token, str) and len(token) >= 40 and token != s.token
    assert written["/var/lib/pdcp/dep/secrets/proxy-admin.token"] == token + "\n"
    assert any("could not be decrypted" in line for line in logged)
    assert Deployment.objects.get(pk=s.deployment.pk).secret_problem == ""
