"""Every string the config writer accepts comes back unchanged from AISBench's own load, dump and reload; the rest
is refused naming its field. ais_bench does not run the file it is given as it is: ConfigManager._dump_and_reload_config
dumps the loaded config without imports and reloads the dump with mmengine's Config.fromfile, which first replaces
{{$NAME:default}} (an environment variable), {{ fileDirname }} and {{_base_.x}} in the file's TEXT, inside string
literals too, and then runs it. Before the writer refused '{{', a served name could read the control plane's
environment into the request (and the log), or close its literal and run code (MMENGINE_CODE did, in the real
ais_bench). Uses the real AISBench install, as test_aisbench_end_to_end.py does: a missing one fails."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from apps.evals.aisbench.config_writer import (
    DatasetConfig,
    EndpointConfig,
    GenerationConfig,
    render_config,
    run_env,
)
from apps.evals.aisbench.install import venv_python
from tests.evals.test_aisbench_config_writer import HOSTILE, MMENGINE
from tests.evals.test_aisbench_end_to_end import installed_ais_bench

pytestmark = pytest.mark.procs  # every test here starts processes or servers

SECRET = "s3cret-of-the-control-plane"
# What ais_bench does with the file it is given, step by step (ais_bench/benchmark/cli/config_manager.py).
RELOAD = """
import json, sys
from mmengine.config import Config
from ais_bench.benchmark.cli.utils import recur_convert_config_type
out = {}
for path in sys.argv[1:]:
    cfg = Config.fromfile(path, format_python_code=False)  # _get_config_from_arg
    recur_convert_config_type(cfg)  # _dump_and_reload_config
    cfg.dump(path + ".dump.py")
    again = Config.fromfile(path + ".dump.py", format_python_code=False)
    model, dataset = again["models"][0], again["datasets"][0]
    out[path] = {"model": model["model"], "path": model["path"], "dataset": dataset["path"]}
print(json.dumps(out))
"""


def test_what_the_writer_accepts_survives_the_reload_unchanged_and_the_rest_is_refused(tmp_path):
    ais_bench = installed_ais_bench()
    marker = tmp_path / "ran"
    # MMENGINE's code-running name, aimed at this test's own marker file instead of /tmp/pdcp-pwned
    values = HOSTILE + [v.replace("/tmp/pdcp-pwned", str(marker)) for v in MMENGINE] + [
        "{{$PDCP_RELOAD_SECRET:x}}", "{question}", "a{b}c", "$HOME", "%(x)s"]
    generation = GenerationConfig(max_out_len=8)
    jobs, expected, refused = [], {}, []
    for i, value in enumerate(values):
        path = f"{tmp_path}/dir-{i}-" + value.replace("/", "_")
        try:
            endpoint = EndpointConfig("http://127.0.0.1:9/", value)
            source = render_config("m", endpoint, generation, DatasetConfig("d", "aime", path), path)
        except ValueError as exc:
            assert str(exc).split(":")[0] in ("served_model", "path", "tokenizer_path"), exc
            refused.append(value)
            continue
        config = tmp_path / f"job-{i}.py"
        config.write_text(source)
        jobs.append(str(config))
        expected[str(config)] = {"model": value, "path": path, "dataset": path}
    env = run_env({**os.environ, "PDCP_RELOAD_SECRET": SECRET}, "127.0.0.1")
    env.pop("PDCP_NOPE", None)  # MMENGINE_CODE's variable: unset, so mmengine puts its "default" in
    done = subprocess.run([str(venv_python(Path(ais_bench))), "-c", RELOAD, *jobs], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert not marker.exists(), "a served name ran code in ais_bench's config loader"
    assert SECRET not in done.stdout + done.stderr, "an environment variable was read into the config"
    assert all(v in refused for v in values if "{{" in v or "}}" in v or "\n" in v), refused
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
