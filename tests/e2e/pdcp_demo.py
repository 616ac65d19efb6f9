"""examples/pdcp-demo.sh run as an operator's shell would, against a live stack (tests/e2e/conftest.py live_stack):
only the venv's `pdcp` on PATH, the server and an admin's password in PDCP_* and a config file of its own."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-admin-password-123"


def make_admin():
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role

    admin = get_user_model().objects.create_user("admin", password=PASSWORD)
    set_role(admin, Role.ADMIN)
    return admin


def pdcp_env(live_stack: str, tmp_path: Path) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "pdcp").exists(), "the pdcp entry point is missing: pip install -e '.[dev]' (make venv)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDCP_")}
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", PDCP_URL=live_stack,
               PDCP_USER="admin", PDCP_PASSWORD=PASSWORD, PDCP_CONFIG=str(tmp_path / "pdcp" / "config.toml"))
    return env


def run_demo(env: dict[str, str], inventory: str, spec: Path, name: str, cwd: Path,
             timeout: float) -> subprocess.CompletedProcess:
    """The script's run; its time, stdout and stderr are also kept in cwd/demo.log (no timed assertion: a loaded
    machine took 78 s where a quiet one takes 12; the run is bounded by `timeout`)."""
    started = time.monotonic()
    result = subprocess.run(["bash", str(ROOT / "examples" / "pdcp-demo.sh"), inventory, str(spec), name], env=env,
                            cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)
    took = time.monotonic() - started
    (cwd / "demo.log").write_text(f"took {took:.1f} s\n" + result.stdout + "\n--- stderr\n" + result.stderr)
    assert result.returncode == 0, result.stdout[-5000:] + "\n--- stderr\n" + result.stderr[-3000:]
    return result
