"""manage.py load_deployment FILE --cluster C --name N: create a deployment (or add a revision) from a topology file."""

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

import plainyaml
from apps.deployments.models import Deployment
from apps.deployments.revision_checks import RevisionInvalid
from apps.deployments.services import deployment_create, revision_create
from apps.inventory.models import Cluster


class Command(BaseCommand):
    help = "Create a deployment from a topology YAML file; if it exists, add the file as a new revision."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument("--launch-profile", choices=["vllm-ascend", "sim"],
                            help="override the file's launch_profile (e.g. sim for the simulated cluster)")
        parser.add_argument("--run-dir", help="override the file's run_dir")
        parser.add_argument("--if-missing", action="store_true", help="do nothing if the deployment exists")

    def handle(self, *args, file: Path, cluster: str, name: str, launch_profile=None, run_dir=None,
               if_missing=False, **options):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        if launch_profile or run_dir:
            data = plainyaml.load(text)
            if launch_profile:
                data["launch_profile"] = launch_profile
            if run_dir:
                data["run_dir"] = run_dir
            text = yaml.safe_dump(data, sort_keys=False)
        target = Cluster.objects.filter(name=cluster).first()
        if target is None:
            raise CommandError(f"no cluster named {cluster!r}")
        try:
            existing = Deployment.objects.filter(name=name, cluster=target).first()
            if existing and if_missing:
                self.stdout.write(f"deployment {name!r} exists")
            elif existing:
                revision = revision_create(deployment=existing, user=None, yaml_text=text, comment=f"from {file.name}")
                self.stdout.write(f"deployment {name!r}: added revision {revision.number} (not activated)")
            else:
                deployment_create(name=name, cluster=target, user=None, yaml_text=text,
                                  description=f"loaded from {file.name}")
                self.stdout.write(self.style.SUCCESS(f"deployment {name!r} created on cluster {cluster!r}"))
        except RevisionInvalid as exc:
            for problem in exc.problems:
                self.stderr.write(f"{problem.path}: {problem.message} (fix: {problem.suggestion})")
            raise CommandError(f"{file} does not validate against cluster {cluster!r}") from exc
