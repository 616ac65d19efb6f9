"""What each `pdcp` command does: the API calls and the text it prints (--json prints the API's JSON instead).
Each returns the exit code (docs/cli.md: 0 done or the job successful, 1 the job failed, 2 canceled)."""

from __future__ import annotations

import getpass
import os
import sys
import time
from pathlib import Path

from . import config as configuration
from . import progress
from .api import ApiError, Client, CliError
from .inventory import inline_key_files
from .output import cell, clock, duration, print_json, table, value_text, when
from .progress import Row, final_line, job_exit_code, watch

EVAL_EXIT = {"succeeded": 0, "failed": 1, "canceled": 2}
EVAL_FINISHED = frozenset(EVAL_EXIT)
JOB_PARAMS = ("max_parallel", "sequential", "health_timeout", "stop_grace", "keep_on_failure")


class Context:
    """What every command gets: the parsed arguments, the client (made on first use), and the output streams."""

    def __init__(self, args, out=None, err=None):
        self.args, self.out, self.err = args, out or sys.stdout, err or sys.stderr
        self._client = None

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def client(self) -> Client:
        if self._client is None:
            cfg = configuration.load()
            if not cfg.url:
                raise CliError("no server configured: set PDCP_URL, or run `pdcp login --url URL --user NAME`")
            if not cfg.token:
                raise CliError(f"no token for {cfg.url}: set PDCP_TOKEN, or run `pdcp login --url {cfg.url} "
                               "--user NAME`")
            self._client = Client(cfg.url, cfg.token, ca_bundle=cfg.ca_bundle)
        return self._client

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def emit(self, data, text=None) -> None:
        """--json: the API's data; else `text` (a string, or a callable that prints)."""
        if self.json:
            print_json(data, self.out)
        elif callable(text):
            text()
        elif text is not None:
            self.say(text)

    @property
    def progress_out(self):
        return self.err if self.json else self.out  # --json keeps stdout for the JSON


def read_input(name: str) -> str:
    try:
        return sys.stdin.read() if name == "-" else Path(name).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}") from None


# --- lookups ------------------------------------------------------------------------------------------------

def _by_name_or_id(client: Client, path: str, ref: str, what: str) -> dict:
    """A name first (exact), then an id: a deployment may well be named "42"."""
    found = client.get(path, name=ref, limit=2)
    results = found.get("results", found) if isinstance(found, dict) else found
    if results:
        return results[0]
    if ref.isdecimal():
        try:
            return client.get(f"{path}{ref}/")
        except ApiError as exc:
            if exc.status != 404:
                raise
    raise CliError(f"no {what} named {ref!r}" + (" or with that id" if ref.isdecimal() else ""))


def deployment(ctx: Context, ref: str) -> dict:
    return _by_name_or_id(ctx.client, "/api/deployments/", ref, "deployment")


def cluster(ctx: Context, ref: str) -> dict:
    return _by_name_or_id(ctx.client, "/api/clusters/", ref, "cluster")


# --- login, whoami ------------------------------------------------------------------------------------------

def cmd_login(ctx: Context) -> int:
    args = ctx.args
    path = configuration.config_path()
    url = args.url or configuration.load().url
    if not url:
        raise CliError("give the server: pdcp login --url URL --user NAME")
    url = url.rstrip("/")
    if "://" not in url:
        raise CliError(f"{url}: the URL needs its scheme, e.g. http://{url}")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        try:
            password = getpass.getpass(f"Password for {args.user} at {url}: ")
        except EOFError:
            password = ""
    if not password:
        raise CliError("no password given")
    client = Client(url, ca_bundle=os.environ.get("PDCP_CA_BUNDLE"))
    body = client.request("POST", "/api/auth/token/", body={"username": args.user, "password": password},
                          auth=False).body
    token = body.get("token") if isinstance(body, dict) else None
    if not token:
        raise CliError(f"{url} answered without a token: is it the control plane?")
    configuration.save(path, {"url": url, "token": token})
    expires = when(body.get("expires"))
    ctx.emit({"url": url, "user": args.user, "config": str(path), "expires": body.get("expires")},
             f"logged in to {url} as {args.user}; the token is in {path}"
             + (f" (expires {expires})" if expires else ""))
    return 0


def cmd_whoami(ctx: Context) -> int:
    me = ctx.client.get("/api/me/")
    ctx.emit(me, f"{me.get('username')} ({me.get('role') or 'no role'}) at {ctx.client.url}")
    return 0


# --- inventory ----------------------------------------------------------------------------------------------

def cmd_clusters(ctx: Context) -> int:
    rows = ctx.client.get_all("/api/clusters/")
    ctx.emit(rows, lambda: table(rows, [("ID", "id"), ("NAME", "name"), ("NODES", "node_count"),
                                        ("DESCRIPTION", "description")], ctx.out))
    return 0


def cmd_nodes(ctx: Context) -> int:
    params = {}
    if ctx.args.cluster:
        params["cluster" if ctx.args.cluster.isdecimal() else "cluster_name"] = ctx.args.cluster
    if ctx.args.label:
        params["label"] = ctx.args.label
    rows = ctx.client.get_all("/api/nodes/", **params)

    def npus(row):
        total, bad = row.get("npu_total") or 0, row.get("npu_unhealthy") or 0
        return f"{total}/{row.get('npu_count') or 0}" + (f" ({bad} unhealthy)" if bad else "")

    ctx.emit(rows, lambda: table(rows, [
        ("ID", "id"), ("CLUSTER", "cluster_name"), ("NAME", "name"), ("ADDRESS", "address"),
        ("HARDWARE", "hardware_model"), ("NPUS", npus), ("REACHABILITY", "reachability"), ("LABELS", "labels")],
        ctx.out))
    return 0


def cmd_import(ctx: Context) -> int:
    source = ctx.args.file
    text = read_input(source)
    base = Path.cwd() if source == "-" else Path(source).expanduser().resolve().parent
    text, key_files = inline_key_files(text, base)
    counts = ctx.client.post("/api/inventory/import/", {"text": text})

    def show():
        for name in key_files:
            ctx.say(f"read the key file {name} here and sent it as private_key")
        ctx.say("imported: " + ", ".join(f"{counts.get(k, 0)} {label}" for k, label in (
            ("credentials", "credentials"), ("clusters", "clusters"), ("nodes_created", "nodes created"),
            ("nodes_updated", "nodes updated"))))

    ctx.emit(counts, show)
    return 0


# --- deployments and revisions ------------------------------------------------------------------------------

def _active(row: dict) -> str | None:
    return f"r{row['active_revision']}" if row.get("active_revision") else None


def cmd_deployments(ctx: Context) -> int:
    params = {}
    if ctx.args.cluster:
        params["cluster" if ctx.args.cluster.isdecimal() else "cluster_name"] = ctx.args.cluster
    rows = ctx.client.get_all("/api/deployments/", **params)
    ctx.emit(rows, lambda: table(rows, [
        ("ID", "id"), ("NAME", "name"), ("CLUSTER", "cluster_name"), ("ACTIVE", _active),
        ("REVISIONS", "revision_count"), ("RUNNING", "running_count"), ("PROFILE", "launch_profile"),
        ("MODEL", "served_model")], ctx.out))
    return 0


def cmd_deployment_show(ctx: Context) -> int:
    d = deployment(ctx, ctx.args.deployment)

    def show():
        for label, key in (("id", "id"), ("name", "name"), ("cluster", "cluster_name"),
                           ("description", "description"), ("active revision", "active_revision"),
                           ("revisions", "revision_count"), ("running processes", "running_count"),
                           ("launch profile", "launch_profile"), ("served model", "served_model"),
                           ("created", "created"), ("updated", "updated")):
            value = d.get(key)
            ctx.say(f"{label + ':':<19} {cell(when(value) if key in ('created', 'updated') else value)}")
        if d.get("secret_problem"):
            ctx.say(f"{'secret problem:':<19} {d['secret_problem']}")

    ctx.emit(d, show)
    return 0


def cmd_deployment_create(ctx: Context) -> int:
    args = ctx.args
    c = cluster(ctx, args.cluster)
    body = {"name": args.name, "cluster": c["id"], "yaml_text": read_input(args.file),
            "description": args.description or ""}
    d = ctx.client.post("/api/deployments/", body)
    ctx.emit(d, f"created deployment {d.get('name')} (id {d.get('id')}) on {c['name']}, "
                f"revision {d.get('active_revision')} active")
    return 0


def revisions_of(ctx: Context, d: dict) -> list[dict]:
    return ctx.client.get_all(f"/api/deployments/{d['id']}/revisions/")


def cmd_revision_create(ctx: Context) -> int:
    args = ctx.args
    d = deployment(ctx, args.deployment)
    r = ctx.client.post(f"/api/deployments/{d['id']}/revisions/", {
        "yaml_text": read_input(args.file), "comment": args.comment or "", "activate": bool(args.activate)})
    ctx.emit(r, f"{d['name']}: revision {r.get('number')} created" + (" and active" if r.get("is_active") else
                                                                         f" (r{d.get('active_revision')} stays "
                                                                         "active; --activate makes it active)"
                                                                         if d.get("active_revision") else ""))
    return 0


def cmd_revision_activate(ctx: Context) -> int:
    d = deployment(ctx, ctx.args.deployment)
    r = ctx.client.post(f"/api/deployments/{d['id']}/activate/", {"revision": ctx.args.number, "deploy": False})
    ctx.emit(r, f"{d['name']}: revision {r.get('number')} is active (`pdcp deploy {d['name']}` runs it)")
    return 0


def cmd_revision_show(ctx: Context) -> int:
    d = deployment(ctx, ctx.args.deployment)
    found = ctx.client.get("/api/revisions/", deployment=d["id"], number=ctx.args.number).get("results", [])
    if not found:
        raise CliError(f"{d['name']} has no revision {ctx.args.number}")
    r = found[0]
    ctx.emit(r, lambda: ctx.out.write(r.get("yaml_text") or ""))
    return 0


def cmd_revisions(ctx: Context) -> int:
    d = deployment(ctx, ctx.args.deployment)
    rows = revisions_of(ctx, d)
    ctx.emit(rows, lambda: table(rows, [
        ("REV", lambda r: f"{r['number']}{' *' if r.get('is_active') else ''}"), ("CREATED", lambda r: when(r.get("created"))),
        ("BY", "created_by"), ("PROFILE", "launch_profile"), ("MODEL", "served_model"), ("COMMENT", "comment")],
        ctx.out, empty=f"{d['name']} has no revisions"))
    if not ctx.json and rows:
        ctx.say("(* = active)")
    return 0


def cmd_diff(ctx: Context) -> int:
    """As the API defaults: no number, the newest revision against the active one; one number, that revision against
    the active one; two, OLD against NEW."""
    args = ctx.args
    d = deployment(ctx, args.deployment)
    old, new = (None, args.old) if args.new is None else (args.old, args.new)
    body = ctx.client.get(f"/api/deployments/{d['id']}/diff/", **{k: v for k, v in (("old", old), ("new", new)) if v is not None})
    changes = body.get("changes", [])

    def show():
        ctx.say(f"{d['name']} r{body.get('old', old)} -> r{body.get('new', new)}: "
                + (f"{len(changes)} change{'s' if len(changes) != 1 else ''}" if changes else "no changes"))
        for c in changes:
            if c.get("old") is None:
                ctx.say(f"  + {c['path']}: {value_text(c.get('new'))}")
            elif c.get("new") is None:
                ctx.say(f"  - {c['path']}: {value_text(c.get('old'))}")
            else:
                ctx.say(f"  ~ {c['path']}: {value_text(c.get('old'))} -> {value_text(c.get('new'))}")

    ctx.emit(body, show)
    return 0


def cmd_plan(ctx: Context) -> int:
    d = deployment(ctx, ctx.args.deployment)
    body = ctx.client.get(f"/api/deployments/{d['id']}/plan/", revision=ctx.args.revision)

    def show():
        ctx.say(f"# {d['name']} r{body.get('revision')} (profile {body.get('profile')}): nothing runs")
        ctx.out.write((body.get("text") or "").rstrip("\n") + "\n")
        for warning in body.get("warnings") or []:
            ctx.say(f"warning: {warning}")

    ctx.emit(body, show)
    return 0


# --- jobs ---------------------------------------------------------------------------------------------------

def job_params(args) -> dict:
    return {name: getattr(args, name) for name in JOB_PARAMS if getattr(args, name, None) not in (None, False)}


def started(ctx: Context, job: dict, what: str) -> int:
    """A job-starting action answered (202, the job in the body): --wait follows it, else says how to."""
    job_id = job.get("id")
    if not ctx.args.wait:
        ctx.emit(job, f"job {job_id} started: {what} (`pdcp job {job_id} --wait` follows it)")
        return 0
    return wait_job(ctx, job_id)


def wait_job(ctx: Context, job_id: int, extra=None) -> int:
    job = watch(ctx.client, job_id, out=ctx.progress_out, extra=extra)
    if ctx.json:
        print_json(job, ctx.out)
    else:
        ctx.say(final_line(job))
    return job_exit_code(job)


def cmd_deploy(ctx: Context) -> int:
    args = ctx.args
    d = deployment(ctx, args.deployment)
    params = job_params(args)
    number = args.revision
    if number is not None and number != d.get("active_revision"):
        if params:
            # rollback (activate + deploy in one) takes no job parameters: activate, then deploy with them
            ctx.client.post(f"/api/deployments/{d['id']}/activate/", {"revision": number, "deploy": False})
        else:
            job = ctx.client.post(f"/api/deployments/{d['id']}/activate/", {"revision": number, "deploy": True})
            return started(ctx, job, f"deploy {d['name']} r{number} (now active)")
    job = ctx.client.post(f"/api/deployments/{d['id']}/deploy/", params)
    return started(ctx, job, f"deploy {d['name']} r{number or d.get('active_revision')}")


def _simple_job(action: str, label: str):
    def command(ctx: Context) -> int:
        d = deployment(ctx, ctx.args.deployment)
        job = ctx.client.post(f"/api/deployments/{d['id']}/{action}/", job_params(ctx.args))
        return started(ctx, job, f"{label} {d['name']}")

    return command


cmd_stop = _simple_job("stop", "stop")
cmd_refresh = _simple_job("refresh", "read the state back from the nodes of")
cmd_preflight = _simple_job("preflight", "preflight")


def cmd_restart(ctx: Context) -> int:
    args = ctx.args
    d = deployment(ctx, args.deployment)
    params = job_params(args)
    if args.instance:
        job = ctx.client.post(f"/api/deployments/{d['id']}/restart/", {**params, "instance": args.instance})
        return started(ctx, job, f"restart {args.instance} of {d['name']}")
    job = ctx.client.post(f"/api/deployments/{d['id']}/rolling-restart/", {**params, "role": args.role})
    return started(ctx, job, f"rolling restart of {d['name']}'s {args.role} instances")


JOB_COLUMNS = [("ID", "id"), ("KIND", "kind"), ("STATUS", "status"), ("TARGET", "target_label"),
               ("CREATED", lambda j: when(j.get("created"))), ("TOOK", lambda j: duration(j.get("duration_seconds"))),
               ("BY", "created_by")]


def cmd_jobs(ctx: Context) -> int:
    args = ctx.args
    params = {"status": args.status, "kind": args.kind}
    if args.deployment:
        d = deployment(ctx, args.deployment)
        params.update(target_type="deployments.deployment", target_id=d["id"])
    rows = ctx.client.get_all("/api/jobs/", most=args.limit, page=min(args.limit, 500), **params)
    ctx.emit(rows, lambda: table(rows, JOB_COLUMNS, ctx.out))
    return 0


def cmd_job(ctx: Context) -> int:
    job_id = ctx.args.id
    if ctx.args.wait:
        return wait_job(ctx, job_id)
    job = ctx.client.get(f"/api/jobs/{job_id}/")

    def show():
        ctx.say(final_line(job) if job.get("finished") else f"job {job_id} {job.get('kind')} "
                f"{job.get('target_label')}: {job.get('status')}")
        ctx.say(f"created {when(job.get('created'))} by {cell(job.get('created_by'))}; params {cell(job.get('params'))}")
        rows = job.get("node_summaries") or []
        if rows:
            table(rows, [("NODE", "node"), ("STATE", "state"),
                         ("STEPS", lambda s: f"{s.get('steps_done', 0)}/{s.get('steps_total', 0)}"),
                         ("%", "percent"), ("MESSAGE", "message")], ctx.out)

    ctx.emit(job, show)
    return 0 if not job.get("finished") else job_exit_code(job)


def cmd_cancel(ctx: Context) -> int:
    job = ctx.client.post(f"/api/jobs/{ctx.args.id}/cancel/")
    ctx.emit(job, f"job {job.get('id')}: cancel asked ({job.get('status')})")
    return 0


def event_line(event: dict) -> str:
    node = event.get("node") or "-"
    stream = event.get("stream") or "info"
    return f"{clock(event.get('time'))} {node:<10} {stream:<6} {event.get('text', '')}"


def cmd_logs(ctx: Context) -> int:
    job_id, after = ctx.args.id, 0
    while True:
        job = ctx.client.get(f"/api/jobs/{job_id}/") if ctx.args.follow else None
        events = progress.fetch_events(ctx.client, job_id, after)
        for event in events:
            after = max(after, int(event.get("counter") or 0))
            if ctx.args.node and event.get("node") != ctx.args.node:
                continue
            if ctx.json:
                print_json(event, ctx.out)
            else:
                ctx.say(event_line(event))
        ctx.out.flush()
        if not ctx.args.follow:
            return 0
        if job.get("status") in progress.FINISHED:
            if not ctx.json:
                ctx.err.write(final_line(job) + "\n")
            return job_exit_code(job)
        time.sleep(progress.POLL_SECONDS)


# --- evals --------------------------------------------------------------------------------------------------

EVAL_SETTINGS = ("api_style", "stream", "ignore_eos", "max_out_len", "concurrency", "request_rate", "temperature",
                 "num_prompts", "num_warmups", "tokenizer_path", "time_limit_s")


def _stats_text(stats: dict) -> str:
    shown = [(k, stats[k]) for k in ("median", "p50", "p75", "p90", "p95", "p99") if stats.get(k) is not None]
    unit = f" {stats['unit']}" if stats.get("unit") else ""
    return ", ".join(f"{k} {cell(v)}" for k, v in shown) + unit


def _entry_lines(entry: dict, several: bool) -> list[str]:
    head, indent = (f"  {entry.get('model')} · {entry.get('dataset')}:", "    ") if several else ("", "  ")
    lines = [head] if head else []
    acc = entry.get("accuracy") or {}
    if acc and acc.get("score") is None:
        lines.append(f"{indent}accuracy: no score (AISBench wrote '-': its infer or eval task failed)")
    elif acc:
        others = ", ".join(f"{k} {cell(v)}" for k, v in (acc.get("scores") or {}).items() if k != "accuracy")
        lines.append(f"{indent}accuracy: {acc['score']:.2f}%" + (f" ({others})" if others else ""))
    perf = entry.get("performance") or {}
    stage = perf.get("headline_stage")
    summary = (perf.get("summary") or {}).get(stage) or {}
    for key in ("request_throughput", "output_token_throughput"):
        if summary.get(key) is not None:
            lines.append(f"{indent}{key.replace('_', ' ')}: {summary[key]:.2f}" +
                         (f" (stage {stage})" if stage != "total" else ""))
    for metric, stats in ((perf.get("percentiles") or {}).get(stage) or {}).items():
        if isinstance(stats, dict) and _stats_text(stats):
            lines.append(f"{indent}{metric}: {_stats_text(stats)}")
    return lines


def eval_summary(run: dict) -> list[str]:
    origin = f" [imported from {run.get('imported_from')}]" if run.get("source") == "imported" else ""
    lines = [f"eval run {run.get('id')} on {run.get('deployment_name')} r{run.get('revision_number')} "
             f"({run.get('mode')}, {run.get('dataset_key')}): {run.get('status')}{origin}"]
    entries = [e for e in run.get("results") or [] if isinstance(e, dict)]
    for entry in entries:
        lines += _entry_lines(entry, len(entries) > 1)
    if run.get("explanation"):
        lines.append(f"  {' '.join(str(run['explanation']).split())}")
    return lines


def cmd_eval_run(ctx: Context) -> int:
    args = ctx.args
    d = deployment(ctx, args.deployment)
    settings = {"dataset": args.dataset, "mode": args.kind}
    settings.update({name: getattr(args, name) for name in EVAL_SETTINGS if getattr(args, name, None) is not None})
    run = ctx.client.post("/api/evals/runs/", {"deployment": d["id"], "settings": settings})
    if not args.wait:
        ctx.emit(run, f"eval run {run.get('id')} started on {d['name']} (job {cell(run.get('job'))}; "
                      f"`pdcp eval show {run.get('id')}` for its results)")
        return 0
    return wait_eval(ctx, run)


def wait_eval(ctx: Context, run: dict) -> int:
    run_id = run["id"]

    def run_row(_job) -> list[Row]:
        r = ctx.client.get(f"/api/evals/runs/{run_id}/")
        return [Row("eval", r.get("status") or "?", int(r.get("progress_done") or 0),
                    int(r.get("progress_total") or 0), r.get("phase") or "")]

    if run.get("job"):
        watch(ctx.client, run["job"], out=ctx.progress_out, extra=run_row)
    final = ctx.client.get(f"/api/evals/runs/{run_id}/")
    while final.get("status") not in EVAL_FINISHED:  # the job is over; the run's own status follows at once
        time.sleep(progress.POLL_SECONDS)
        final = ctx.client.get(f"/api/evals/runs/{run_id}/")
    ctx.emit(final, lambda: [ctx.say(line) for line in eval_summary(final)])
    return EVAL_EXIT.get(final.get("status"), 1)


def cmd_eval_list(ctx: Context) -> int:
    params = {"status": ctx.args.status}
    if ctx.args.deployment:
        params["deployment"] = deployment(ctx, ctx.args.deployment)["id"]
    rows = ctx.client.get_all("/api/evals/runs/", most=ctx.args.limit, page=min(ctx.args.limit, 500), **params)
    ctx.emit(rows, lambda: table(rows, [
        ("ID", "id"), ("DEPLOYMENT", "deployment_name"), ("REV", "revision_number"), ("MODE", "mode"),
        ("DATASET", "dataset_key"), ("CONC", "concurrency"), ("STATUS", "status"), ("%", "percent"),
        ("ACCURACY", "accuracy"), ("CREATED", lambda r: when(r.get("created")))], ctx.out))
    return 0


def cmd_eval_show(ctx: Context) -> int:
    run = ctx.client.get(f"/api/evals/runs/{ctx.args.id}/")
    if ctx.args.wait and run.get("status") not in EVAL_FINISHED:
        return wait_eval(ctx, run)
    ctx.emit(run, lambda: [ctx.say(line) for line in eval_summary(run)])
    return EVAL_EXIT.get(run.get("status"), 0)


def cmd_eval_import(ctx: Context) -> int:
    args = ctx.args
    fields: dict = {}
    if args.deployment:
        fields["deployment"] = deployment(ctx, args.deployment)["id"]
    for name in ("revision", "label", "concurrency", "max_out_len", "dataset", "note"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    fields["ignore_eos"] = args.ignore_eos
    if args.file == "-":
        run = ctx.client.post("/api/evals/import/", {"text": sys.stdin.read(), **fields})
    else:
        path = Path(args.file)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CliError(f"{args.file}: cannot be read ({exc.strerror})") from None
        run = ctx.client.post_file("/api/evals/import/", {k: str(v).lower() if isinstance(v, bool) else v
                                                          for k, v in fields.items()}, path.name, data)
    ctx.emit(run, lambda: [ctx.say(line) for line in eval_summary(run)])
    return 0


def cmd_eval_datasets(ctx: Context) -> int:
    rows = ctx.client.get_all("/api/evals/datasets/")
    ctx.emit(rows, lambda: table(rows, [
        ("KEY", "key"), ("FAMILY", "family"), ("LINES", "lines"), ("RUNNABLE", "runnable"),
        ("PROBLEM", lambda r: r.get("problem") or None), ("TITLE", "title")], ctx.out))
    return 0
