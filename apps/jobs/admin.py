from django.contrib import admin

from .models import Job, JobEvent, JobNodeSummary


class JobNodeSummaryInline(admin.TabularInline):
    model = JobNodeSummary
    extra = 0
    can_delete = False
    readonly_fields = ["node", "state", "steps_done", "steps_total", "message"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "target_label", "status", "created_by", "created", "finished"]
    list_filter = ["kind", "status"]
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobNodeSummaryInline]


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["job", "counter", "node", "stream", "text"]
    list_filter = ["stream"]
    readonly_fields = [f.name for f in JobEvent._meta.fields]
