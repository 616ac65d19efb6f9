"""Pool agents share one network namespace (simcluster/kvpool.py): a new agent joins a live agent's. That agent
may exit between being picked and `nsenter` opening its namespace (its engine was stopped by another deployment
of the same user): the new agent must try again, not die with "nsenter: cannot open /proc/<pid>/ns/net" (seen in
a full run: a deploy failed with "Initialize mooncake failed")."""

import asyncio
import subprocess
import sys

import pytest

from simcluster import kvpool

pytestmark = pytest.mark.procs  # starts the agent stand-in under unshare / nsenter


def test_an_agent_whose_namespace_owner_exited_creates_or_joins_another(monkeypatch, tmp_path):
    monkeypatch.setenv("SIMCLUSTER_KVPOOL_DIR", str(tmp_path / "pool"))  # no other test's agents
    kvpool.pool_dir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid with no /proc entry: nsenter -t <it> fails as it did in the run
    real = kvpool._live_agent
    picked = []

    def live_agent_that_exits_first(directory):
        picked.append(real(directory) if picked else gone.pid)
        return picked[-1]

    monkeypatch.setattr(kvpool, "_live_agent", live_agent_that_exits_first)
    stand_in = [sys.executable, "-c", "import time; print('READY x', flush=True); time.sleep(30)"]

    async def spawn():
        proc = await kvpool.PoolAgent._spawn(kvpool.pool_dir(), stand_in)
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 10)
            return line, kvpool._netns(proc.pid)
        finally:
            proc.kill()
            await proc.wait()

    line, netns = asyncio.run(spawn())
    assert picked[0] == gone.pid and len(picked) == 2, picked
    assert line == b"READY x\n"
    assert netns not in (None, kvpool._netns("self")), "the agent runs outside the pool's namespace"
