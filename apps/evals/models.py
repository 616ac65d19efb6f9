"""Eval records: uploaded datasets, runs (typed AISBench settings + what they measured), per-sample answers, sweeps.

A run keeps copies of what it ran against (deployment and revision numbers, endpoint, spec), so its results stay
readable and comparable after the deployment changed or was deleted.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.audit.registry import audited

from .choices import EVAL_FINISHED, EVAL_RESUMABLE, ApiStyle, EvalMode, EvalSource, EvalStatus

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9_-]{0,62}$",
                                "lowercase letters, digits, '_' and '-', starting with a letter or digit")


@audited()
class EvalDataset(models.Model):
    """A JSONL set an operator uploaded (validated line by line before it was stored)."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    family = models.CharField(max_length=20, help_text="How it is scored: aime (\\boxed{} integer) or gsm8k")
    description = models.CharField(max_length=200, blank=True)
    file_name = models.CharField(max_length=200, help_text="Below PDCP_DATA_DIR/evals/datasets/")
    lines = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


@audited()
class EvalSweep(models.Model):
    """One action: a performance series over several concurrencies against one deployment."""

    deployment = models.ForeignKey("deployments.Deployment", null=True, on_delete=models.SET_NULL, related_name="+")
    deployment_name = models.CharField(max_length=63)
    concurrencies = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"sweep #{self.pk} {self.deployment_name}"


class EvalRun(models.Model):
    # what it ran against (copied: the deployment may change or go)
    deployment = models.ForeignKey("deployments.Deployment", null=True, on_delete=models.SET_NULL,
                                   related_name="eval_runs")
    deployment_name = models.CharField(max_length=63)
    revision = models.ForeignKey("deployments.Revision", null=True, on_delete=models.SET_NULL, related_name="+")
    revision_number = models.PositiveIntegerField()
    revision_spec = models.JSONField(help_text="The active revision's spec when the run was created")
    endpoint_url = models.CharField(max_length=300, help_text="The proxy's base URL, e.g. http://10.0.0.5:8000/")
    served_model = models.CharField(max_length=200)
    simulated = models.BooleanField(default=False, help_text="Ran against the simulated cluster")
    client_node = models.CharField(max_length=63, blank=True,
                                   help_text="The AISBench client host it ran on; empty: the control plane's worker")
    # what it ran (typed; the AISBench config file is generated from these)
    mode = models.CharField(max_length=12, choices=EvalMode.choices)
    dataset_key = models.CharField(max_length=80, help_text="catalogue:<name> or upload:<name>")
    dataset_abbr = models.CharField(max_length=63)
    dataset_family = models.CharField(max_length=20)
    dataset_sha256 = models.CharField(max_length=64, blank=True)
    api_style = models.CharField(max_length=12, choices=ApiStyle.choices, default=ApiStyle.CHAT)
    stream = models.BooleanField(default=True)
    ignore_eos = models.BooleanField(
        default=False, help_text="fixed output length: the server ignores end-of-sequence, every answer is max_out_len "
                                 "tokens (performance runs; AISBench's ignore_eos)")
    max_out_len = models.PositiveIntegerField(default=2048, validators=[MinValueValidator(1),
                                                                        MaxValueValidator(1_000_000)])
    concurrency = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1), MaxValueValidator(1000)])
    request_rate = models.FloatField(default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(10_000.0)],
                                     help_text="requests per second; 0 = as fast as the concurrency allows")
    temperature = models.FloatField(default=0.6, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)])
    num_prompts = models.PositiveIntegerField(null=True, blank=True, help_text="first N items; empty = all")
    num_warmups = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(100)])
    tokenizer_path = models.CharField(max_length=500, blank=True,
                                      help_text="Tokenizer directory on the host that runs ais_bench (performance)")
    time_limit_s = models.PositiveIntegerField(default=3600, validators=[MinValueValidator(30),
                                                                        MaxValueValidator(7 * 24 * 3600)])
    sweep = models.ForeignKey(EvalSweep, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    # how it went
    job = models.ForeignKey("jobs.Job", null=True, on_delete=models.SET_NULL, related_name="+",
                            help_text="The latest job that ran it (a resume is a new job)")
    status = models.CharField(max_length=12, choices=EvalStatus.choices, default=EvalStatus.PENDING, db_index=True)
    phase = models.CharField(max_length=60, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    explanation = models.TextField(blank=True)
    log_tail = models.JSONField(default=list, blank=True)
    timestamps = models.JSONField(default=dict, blank=True,
                                  help_text="AISBench's output folder name per pass, e.g. {'accuracy': '20261201_101500'}")
    passes_done = models.JSONField(default=list, blank=True, help_text="Passes judged successful; a resume skips them")
    source = models.CharField(max_length=10, choices=EvalSource.choices, default=EvalSource.RAN, db_index=True)
    imported_from = models.CharField(max_length=300, blank=True,
                                     help_text="An imported run: the file it was read from and its form")
    note = models.CharField(max_length=300, blank=True)
    results = models.JSONField(
        default=list, blank=True,
        help_text="Every figure AISBench wrote, one entry per (model, dataset): apps/evals/results.py entry_of")
    # the headline: the first (model, dataset) entry's figures, for lists, sweeps and the advisor
    accuracy = models.FloatField(null=True, blank=True, help_text="percent")
    accuracy_detail = models.JSONField(default=dict, blank=True)
    perf_summary = models.JSONField(default=dict, blank=True)
    perf_percentiles = models.JSONField(default=dict, blank=True)
    perf_requests = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self):
        return f"eval #{self.pk} {self.get_mode_display()} {self.dataset_abbr} on {self.deployment_name}"

    @property
    def colour(self) -> str:
        return EvalStatus.colour_of(self.status)

    @property
    def imported(self) -> bool:
        return self.source == EvalSource.IMPORTED

    @property
    def is_finished(self) -> bool:
        return self.status in EVAL_FINISHED

    @property
    def can_resume(self) -> bool:
        return self.status in EVAL_RESUMABLE

    @property
    def percent(self) -> int:
        if not self.progress_total:
            return 100 if self.status == EvalStatus.SUCCEEDED else 0
        return min(100, round(100 * self.progress_done / self.progress_total))


class EvalSample(models.Model):
    """One accuracy sample: what was asked, answered, extracted and expected."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="samples")
    model = models.CharField(max_length=200, blank=True)
    dataset = models.CharField(max_length=200, blank=True)
    index = models.PositiveIntegerField()
    question = models.TextField()
    prediction = models.TextField(blank=True)
    extracted = models.CharField(max_length=500, blank=True)
    reference = models.CharField(max_length=500, blank=True)
    correct = models.BooleanField(default=False)
    failed = models.BooleanField(default=False, help_text="The request itself failed (counts as wrong)")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "model", "dataset", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "model", "dataset", "index"],
                                               name="eval_sample_index_unique")]
