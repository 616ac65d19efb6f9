from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from .models import Cluster, Node, Npu, SshCredential
from .services import KIND_CHANGE_NEEDS_SECRET, public_key_of


class SshCredentialForm(forms.ModelForm):
    new_secret = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off"}),
                                 label="Private key or password",
                                 help_text="Stored encrypted; never shown again. Leave empty to keep the current one.")

    class Meta:
        model = SshCredential
        fields = ["name", "username", "kind"]

    def clean(self):
        data = super().clean()
        secret = data.get("new_secret")
        if not secret and not (self.instance and self.instance.secret):
            raise ValidationError({"new_secret": "a private key or password is required"})
        if not secret and self.instance.pk and "kind" in self.changed_data:
            raise ValidationError({"new_secret": KIND_CHANGE_NEEDS_SECRET})
        if secret and data.get("kind") == "private_key":
            try:
                self.instance.public_key = public_key_of(secret)
            except ValueError as exc:
                raise ValidationError({"new_secret": str(exc)}) from exc
        if secret:
            self.instance.secret = secret
        if data.get("kind") == "password":
            self.instance.public_key = ""
        return data


@admin.register(SshCredential)
class SshCredentialAdmin(admin.ModelAdmin):
    form = SshCredentialForm
    list_display = ["name", "username", "kind", "secret_state", "updated"]
    readonly_fields = ["public_key", "secret_state"]

    @admin.display(description="secret")
    def secret_state(self, credential: SshCredential) -> str:
        return credential.secret_problem or "ok"


class NodeInline(admin.TabularInline):
    model = Node
    fields = ["name", "address", "ssh_port", "hardware_model", "reachability"]
    readonly_fields = ["reachability"]
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "updated"]
    fields = ["name", "description", "allowlist"]
    inlines = [NodeInline]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "address", "ssh_port", "hardware_model", "reachability", "last_seen"]
    list_filter = ["cluster", "reachability", "hardware_model"]
    list_select_related = ["cluster"]
    search_fields = ["name", "address"]
    readonly_fields = ["reachability", "reachability_detail", "last_seen"]


@admin.register(Npu)
class NpuAdmin(admin.ModelAdmin):
    list_display = ["node", "npu_id", "chip_id", "logical_id", "name", "health", "hbm_used_mb", "hbm_total_mb",
                    "aicore_percent", "last_seen"]
    list_filter = ["health", "node__cluster"]
    list_select_related = ["node"]
