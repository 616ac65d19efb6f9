"""`pdcp`: the arguments, and main(), which turns every failure into one clear message and an exit code.

Exit codes: 0 done (a waited-for job successful), 1 the job failed or errored, 2 the job was canceled, 3 pdcp
could not do it (bad arguments or config, the server refused, no connection), 130 interrupted (a job goes on)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from . import __version__, commands
from .api import CliError
from .config import ConfigError

EXIT_USAGE = 3


class Parser(argparse.ArgumentParser):
    """Usage errors exit 3 with one line (argparse's own would be 2, which pdcp gives canceled jobs)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"pdcp: {message} (`{self.prog} --help` shows the usage)\n")


def _json_flag(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--json", action="store_true", default=default,
                        help="print the API's JSON instead of text (lists: every result, as one array)")


def _wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true",
                        help="follow the job to its end with a progress bar per node; the exit code is its result")


def _job_params(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job parameters")
    group.add_argument("--max-parallel", type=int, metavar="N", help="SSH fan-out bound (server default 8)")
    group.add_argument("--sequential", action="store_true", help="one node at a time")
    group.add_argument("--health-timeout", type=int, metavar="S",
                       help="seconds each stage may take to be healthy (server default 120)")
    group.add_argument("--stop-grace", type=int, metavar="S", help="seconds between TERM and KILL (server default 10)")
    group.add_argument("--keep-on-failure", action="store_true", help="leave what a failed job started running")


def build_parser() -> Parser:
    parser = Parser(prog="pdcp", description="Command-line client of the PD control plane's REST API. The server "
                    "and token come from PDCP_URL and PDCP_TOKEN, or the config file `pdcp login` writes "
                    "(PDCP_CONFIG, default ~/.config/pdcp/config.toml).",
                    epilog="Exit codes: 0 done / job successful, 1 job failed or errored, 2 job canceled, 3 usage, "
                           "config, server or connection error, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"pdcp {__version__}")
    _json_flag(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name, func, help_text, parent=sub, **kwargs):
        p = parent.add_parser(name, help=help_text, description=help_text, **kwargs)
        _json_flag(p, argparse.SUPPRESS)  # after the command too; the top-level one otherwise stays
        p.set_defaults(func=func)
        return p

    p = command("login", commands.cmd_login, "get an API token and keep it (with the URL) in the config file")
    p.add_argument("--url", help="the control plane, e.g. http://127.0.0.1:8000 (default: the configured one)")
    p.add_argument("--user", required=True, help="user name")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    command("whoami", commands.cmd_whoami, "the user and role the token belongs to")

    command("clusters", commands.cmd_clusters, "list clusters")
    p = command("nodes", commands.cmd_nodes, "list nodes")
    p.add_argument("--cluster", metavar="C", help="only this cluster's (name or id)")
    p.add_argument("--label", metavar="KEY=VALUE", help="only nodes with this label")
    p = command("import", commands.cmd_import, "import an inventory file (YAML, or CSV of nodes); key files it "
                "names are read here and sent as private_key")
    p.add_argument("file", help="the inventory file, - for standard input")

    p = command("deployments", commands.cmd_deployments, "list deployments")
    p.add_argument("--cluster", metavar="C", help="only this cluster's (name or id)")
    dep = command("deployment", None, "show or create one deployment").add_subparsers(
        dest="action", metavar="ACTION", required=True, parser_class=Parser)
    p = command("show", commands.cmd_deployment_show, "a deployment's summary", dep)
    p.add_argument("deployment", help="name or id")
    p = command("create", commands.cmd_deployment_create, "a new deployment with its first revision (active)", dep)
    p.add_argument("name")
    p.add_argument("--cluster", required=True, metavar="C", help="the cluster (name or id)")
    p.add_argument("-f", "--file", required=True, help="the topology spec (YAML), - for standard input")
    p.add_argument("--description", default="")

    p = command("revisions", commands.cmd_revisions, "list a deployment's revisions")
    p.add_argument("deployment", help="name or id")
    rev = command("revision", None, "create, activate or show a revision").add_subparsers(
        dest="action", metavar="ACTION", required=True, parser_class=Parser)
    p = command("create", commands.cmd_revision_create, "a new revision of a deployment's spec", rev)
    p.add_argument("deployment", help="name or id")
    p.add_argument("-f", "--file", required=True, help="the topology spec (YAML), - for standard input")
    p.add_argument("--activate", action="store_true", help="make it the active revision (the next deploy runs it)")
    p.add_argument("--comment", default="", help="why (200 characters at most)")
    p = command("activate", commands.cmd_revision_activate, "make a revision the active one (nothing runs)", rev)
    p.add_argument("deployment", help="name or id")
    p.add_argument("number", type=int)
    p = command("show", commands.cmd_revision_show, "print a revision's spec (YAML)", rev)
    p.add_argument("deployment", help="name or id")
    p.add_argument("number", type=int)

    p = command("diff", commands.cmd_diff, "what changed between two revisions (default: the newest against the "
                "active one; one number: that one against the active one)")
    p.add_argument("deployment", help="name or id")
    p.add_argument("old", nargs="?", type=int, help="revision number (default: the active one)")
    p.add_argument("new", nargs="?", type=int, help="revision number (default: the newest)")
    p = command("plan", commands.cmd_plan, "every command a deploy would run, per stage and node; nothing runs")
    p.add_argument("deployment", help="name or id")
    p.add_argument("--revision", type=int, metavar="N", help="this revision (default: the active one)")

    p = command("preflight", commands.cmd_preflight, "check the nodes a deploy would use (a job)")
    p.add_argument("deployment", help="name or id")
    _wait(p)
    _job_params(p)
    p = command("deploy", commands.cmd_deploy, "deploy the active revision (a job)")
    p.add_argument("deployment", help="name or id")
    p.add_argument("--revision", type=int, metavar="N", help="activate revision N first (a rollback), then deploy")
    _wait(p)
    _job_params(p)
    p = command("stop", commands.cmd_stop, "stop everything the deployment runs (a job)")
    p.add_argument("deployment", help="name or id")
    _wait(p)
    _job_params(p)
    p = command("refresh", commands.cmd_refresh, "read each process's state back from its node into the rows (a job)")
    p.add_argument("deployment", help="name or id")
    _wait(p)
    _job_params(p)
    p = command("restart", commands.cmd_restart, "restart one instance, or every instance of a role one by one")
    p.add_argument("deployment", help="name or id")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--instance", help="an instance name of the active revision")
    which.add_argument("--role", choices=["prefill", "decode"], help="rolling restart of this role's instances")
    _wait(p)
    _job_params(p)

    p = command("jobs", commands.cmd_jobs, "list jobs, newest first")
    p.add_argument("--deployment", metavar="D", help="only this deployment's (name or id)")
    p.add_argument("--status", choices=["pending", "running", "successful", "failed", "error", "canceled"])
    p.add_argument("--kind", help="discover, preflight, deploy, stop, restart, rolling_restart, refresh, evaluate")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    p = command("job", commands.cmd_job, "one job: status, explanation, per-node progress")
    p.add_argument("id", type=int)
    _wait(p)
    p = command("cancel", commands.cmd_cancel, "ask a pending or running job to stop")
    p.add_argument("id", type=int)
    p = command("logs", commands.cmd_logs, "a job's events (its log)")
    p.add_argument("id", type=int, help="the job")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends; exit with its result")
    p.add_argument("--node", help="only this node's events")

    ev = command("eval", None, "evaluations (AISBench): run, list, show, import, datasets").add_subparsers(
        dest="action", metavar="ACTION", required=True, parser_class=Parser)
    p = command("run", commands.cmd_eval_run, "evaluate a deployment's active revision", ev)
    p.add_argument("deployment", help="name or id")
    p.add_argument("--kind", required=True, choices=["accuracy", "performance", "both"], help="what to measure")
    p.add_argument("--dataset", required=True, help="a key from `pdcp eval datasets`, e.g. catalogue:made-up-aime")
    p.add_argument("--api-style", choices=["chat", "completions"], help="default chat")
    stream = p.add_mutually_exclusive_group()
    stream.add_argument("--stream", dest="stream", action="store_true", default=None, help="stream answers (default)")
    stream.add_argument("--no-stream", dest="stream", action="store_false")
    p.add_argument("--max-out-len", type=int, metavar="N", help="most tokens per answer (default 2048)")
    p.add_argument("--ignore-eos", action="store_true", default=None,
                   help="fixed output length: every answer is --max-out-len tokens (performance pass only)")
    p.add_argument("--concurrency", type=int, metavar="N", help="requests in flight (default 4)")
    p.add_argument("--request-rate", type=float, metavar="R", help="requests per second; 0 = as fast as possible")
    p.add_argument("--temperature", type=float, help="sampling temperature (default 0.6)")
    p.add_argument("--num-prompts", type=int, metavar="N", help="only the first N items (default all)")
    p.add_argument("--num-warmups", type=int, metavar="N", help="warm-up requests before measuring (default 1)")
    p.add_argument("--tokenizer-path", help="tokenizer directory on the host that runs ais_bench (performance)")
    p.add_argument("--time-limit", dest="time_limit_s", type=int, metavar="S",
                   help="stop the run after this many seconds (default 3600)")
    _wait(p)
    p = command("list", commands.cmd_eval_list, "list eval runs, newest first", ev)
    p.add_argument("--deployment", metavar="D", help="only this deployment's (name or id)")
    p.add_argument("--status", choices=["pending", "running", "succeeded", "failed", "canceled"])
    p.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    p = command("show", commands.cmd_eval_show, "an eval run's results", ev)
    p.add_argument("id", type=int)
    _wait(p)
    p = command("import", commands.cmd_eval_import, "import an AISBench result made elsewhere", ev)
    p.add_argument("file", help="an output folder as a .zip, a summary_*.md/.txt/.csv, a perf <dataset>.json/.csv; "
                                "- reads pasted console output from stdin")
    p.add_argument("--deployment", metavar="D", help="the deployment it ran on (name or id); default: none")
    p.add_argument("--revision", type=int, metavar="N", help="its revision (default the active one)")
    p.add_argument("--label", help="without --deployment: names the outside system (default external)")
    p.add_argument("--concurrency", type=int, metavar="N", help="default: the Max Concurrency measured")
    p.add_argument("--max-out-len", type=int, metavar="N", help="default: the longest answer measured")
    p.add_argument("--ignore-eos", action="store_true", help="every answer was --max-out-len tokens")
    p.add_argument("--dataset", help="the dataset key it corresponds to (`pdcp eval datasets`), so the advisor "
                                     "groups it with runs made here; default imported:<its dataset>")
    p.add_argument("--note", help="a short note kept with the run")
    command("datasets", commands.cmd_eval_datasets, "the datasets a run may name", ev)
    return parser


def main(argv: list[str] | None = None, *, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # --help, usage errors
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) and usage errors (3) end here
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if getattr(args, "func", None) is None:
        parser.print_help(err)
        return EXIT_USAGE
    if getattr(args, "limit", 1) < 1:
        err.write("pdcp: --limit must be at least 1\n")
        return EXIT_USAGE
    ctx = commands.Context(args, out, err)
    try:
        return args.func(ctx)
    except (CliError, ConfigError) as exc:
        out.flush()
        err.write("".join(f"pdcp: {line}\n" if i == 0 else f"{line}\n"
                          for i, line in enumerate(str(exc).splitlines() or ["failed"])))
        return getattr(exc, "exit_code", EXIT_USAGE)
    except KeyboardInterrupt:
        err.write("pdcp: interrupted\n")
        return 130
    except BrokenPipeError:  # `pdcp jobs | head`: nothing more to say, and nothing to complain about at exit
        if out is sys.__stdout__:
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
