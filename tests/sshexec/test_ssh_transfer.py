"""download_tree brings a remote folder home over SFTP: files and dirs only, bounded in size."""

import os

import pytest

from sshexec import SshConnection, SshTransferFailed
from sshexec.transfer import download_tree

pytestmark = pytest.mark.procs  # every test here starts processes or servers


def _make_tree(conn, root):
    conn.run(f"rm -rf {root}; mkdir -p {root}/a/b {root}/skip && printf one > {root}/a/1.txt && "
             f"printf two > {root}/a/b/2.txt && printf x > {root}/skip/x && ln -s /etc/passwd {root}/a/link && "
             f"mkfifo {root}/a/fifo")


def test_download_tree_copies_files_and_skips_links_and_special_files(target, farm, tmp_path):
    root = f"{farm[0].state_dir}/tree"
    with SshConnection(target) as conn:
        _make_tree(conn, root)
        copied = download_tree(conn, root, tmp_path / "home", skip_dirs=("skip",))
    assert copied == 6
    assert (tmp_path / "home/a/1.txt").read_text() == "one"
    assert (tmp_path / "home/a/b/2.txt").read_text() == "two"
    assert not os.path.lexists(tmp_path / "home/a/link")
    assert not os.path.lexists(tmp_path / "home/a/fifo")
    assert not (tmp_path / "home/skip").exists()


def test_download_tree_refuses_more_than_its_bound(target, farm, tmp_path):
    root = f"{farm[0].state_dir}/tree"
    with SshConnection(target) as conn:
        _make_tree(conn, root)
        with pytest.raises(SshTransferFailed, match="more than 4 bytes"):
            download_tree(conn, root, tmp_path / "home", max_bytes=4)


def test_download_tree_names_a_missing_folder(target, tmp_path):
    with SshConnection(target) as conn:
        with pytest.raises(SshTransferFailed, match="/nonexistent"):
            download_tree(conn, "/nonexistent/out", tmp_path / "home")
