"""A real OpenSSH node for discovery (127.0.10.170-.189 is this suite's range) whose npu-smi prints recorded output."""

import shutil
import tempfile
from pathlib import Path

import pytest

SAMPLES = Path(__file__).parent / "samples"
NODE_ADDRESS = "127.0.10.171"
SECOND_ADDRESS = "127.0.10.172"

# The fake npu-smi reads its behaviour from files the test writes: which sample `info` prints, and health.
FAKE_NPU_SMI = """#!/bin/sh
dir=$(dirname "$0")
if [ "$1" = info ] && [ "$2" = -t ] && [ "$3" = health ]; then
  if [ -f "$dir/health_$5.txt" ]; then cat "$dir/health_$5.txt"; else cat "$dir/health.txt"; fi; exit 0
fi
if [ "$1" = info ] && [ -z "$2" ]; then
  cat "$dir/info.txt"; exit "$(cat "$dir/exit_code" 2>/dev/null || echo 0)"
fi
echo "npu-smi: unsupported arguments: $*" >&2; exit 2
"""


class FakeNpuSmi:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir

    def prints(self, sample: str | None = None, *, text: str | None = None, health: str = "health_ok.txt",
               exit_code: int = 0) -> None:
        (self.bin_dir / "info.txt").write_text(text if text is not None else (SAMPLES / sample).read_text())
        (self.bin_dir / "health.txt").write_text((SAMPLES / health).read_text())
        (self.bin_dir / "exit_code").write_text(str(exit_code))
        for old in self.bin_dir.glob("health_*.txt"):
            old.unlink()
        (self.bin_dir / "npu-smi").chmod(0o755)

    def npu_health(self, npu_id: int, sample: str) -> None:
        (self.bin_dir / f"health_{npu_id}.txt").write_text((SAMPLES / sample).read_text())

    def remove(self) -> None:
        (self.bin_dir / "npu-smi").chmod(0o644)  # not executable: the shell reports it as not found


@pytest.fixture(scope="session")
def sim_root():
    root = Path(tempfile.mkdtemp(prefix="pdcp-discovery-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def client_key(sim_root):
    from simcluster.sshnode import ensure_login_user, generate_client_key

    ensure_login_user()
    return generate_client_key(sim_root / "id_ed25519")


@pytest.fixture(scope="session")
def ssh_node(sim_root, client_key):
    from simcluster.sshnode import start_ssh_node, stop_ssh_node

    bin_dir = sim_root / "bin"
    bin_dir.mkdir()
    bin_dir.chmod(0o755)
    (bin_dir / "npu-smi").write_text(FAKE_NPU_SMI)
    node = start_ssh_node("disc0", NODE_ADDRESS, 22, sim_root / "disc0", client_key[1], bin_dir=bin_dir)
    node.fake = FakeNpuSmi(bin_dir)
    yield node
    stop_ssh_node(node)


@pytest.fixture
def fake_npu_smi(ssh_node):
    ssh_node.fake.prints("full_a3_16die_info.txt")
    return ssh_node.fake


@pytest.fixture
def sim_node(db, ssh_node, client_key, fake_npu_smi):
    """An inventory Node pointing at the real SSH node, host key pinned."""
    from apps.inventory.models import Cluster, Node, SshCredential
    from apps.inventory.services import credential_save

    cred = credential_save(SshCredential(name="simnode", username=ssh_node.user), secret=client_key[0])
    cluster = Cluster.objects.create(name="sim")
    return Node.objects.create(cluster=cluster, name="disc0", address=ssh_node.address, ssh_port=ssh_node.port,
                               credential=cred, host_key=ssh_node.host_key_line, hardware_model="Atlas 800I A3",
                               npu_count=16)
