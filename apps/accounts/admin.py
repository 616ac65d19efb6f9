"""The admin's login page shows the brute-force lockout like /login/ does; its user pages keep the rule of
apps/accounts/services.py (nobody deactivates, demotes or deletes themself or the last active admin) and audit
every change, like the REST API."""

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin as DjangoGroupAdmin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from .forms import ThrottledAdminAuthenticationForm
from .roles import Role, role_from
from .services import (
    UNCHANGED,
    check_admin_change,
    check_users_delete,
    user_change_record,
    user_delete,
    user_state_stored,
)

admin.site.login_form = ThrottledAdminAuthenticationForm
User = get_user_model()


class AdminRuleFormMixin:
    """The user change form refuses what check_admin_change refuses; `actor` is set per request by UserAdmin."""

    actor = None

    def clean(self):
        data = super().clean()
        user = self.instance
        if user.pk is None:
            return data
        stored = User.objects.get(pk=user.pk)
        role = UNCHANGED
        if "groups" in data or "is_superuser" in data:
            names = ({g.name for g in data["groups"]} if "groups" in data
                     else set(stored.groups.values_list("name", flat=True)))
            role = role_from(names, is_superuser=data.get("is_superuser", stored.is_superuser))
        try:
            check_admin_change(self.actor, stored, is_active=data.get("is_active"), role=role)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                if field == "role":  # the role comes from the groups and the superuser status
                    errors = [f"{e} (The role is the highest of the groups {', '.join(r.value for r in Role)}; "
                              "superuser status makes an admin.)" for e in errors]
                self.add_error(field if field in self.fields else None, errors)
        return data


class UserAdmin(DjangoUserAdmin):
    actions = ["delete_selected"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (AdminRuleFormMixin, form), {"actor": request.user})

    def save_model(self, request, obj, form, change):
        form._audit_before = user_state_stored(obj) if change else {}
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        user_change_record(request.user, form.instance, action="update" if change else "create",
                           before=getattr(form, "_audit_before", {}))

    @method_decorator(sensitive_post_parameters())
    def user_change_password(self, request, id, form_url=""):
        user = self.get_object(request, unquote(id))
        if user is None or request.method != "POST":
            return super().user_change_password(request, id, form_url)
        with transaction.atomic():
            before = user_state_stored(user)
            response = super().user_change_password(request, id, form_url)
            user_change_record(request.user, user, action="update", before=before, after=user_state_stored(user))
        return response

    def _refused(self, request, users) -> str:
        try:
            check_users_delete(request.user, users)
        except ValidationError as exc:
            return " ".join(exc.messages)
        return ""

    def delete_view(self, request, object_id, extra_context=None):
        with transaction.atomic():
            user = self.get_object(request, unquote(object_id))
            refused = user is not None and self._refused(request, [user])
            if refused:
                self.message_user(request, refused, messages.ERROR)
                return HttpResponseRedirect(reverse("admin:auth_user_change", args=[user.pk]))
            return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request, obj):
        user_delete(request.user, obj)

    @admin.action(permissions=["delete"], description=django_delete_selected.short_description)
    def delete_selected(self, request, queryset):
        with transaction.atomic():
            refused = self._refused(request, queryset)
            if refused:
                self.message_user(request, refused, messages.ERROR)
                return None
            return django_delete_selected(self, request, queryset)

    def delete_queryset(self, request, queryset):
        for user in queryset:
            user_delete(request.user, user)


class GroupAdmin(DjangoGroupAdmin):
    """The role groups (viewer, operator, admin) are the roles: renaming or deleting one would take the role from
    everyone in it."""

    actions = ["delete_selected"]

    def get_readonly_fields(self, request, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        return readonly + ["name"] if obj is not None and obj.name in Role.values else readonly

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not (obj is not None and obj.name in Role.values)

    @admin.action(permissions=["delete"], description=django_delete_selected.short_description)
    def delete_selected(self, request, queryset):
        roles = sorted(queryset.filter(name__in=Role.values).values_list("name", flat=True))
        if roles:
            self.message_user(request, f"The role groups ({', '.join(roles)}) cannot be deleted: they are the roles.",
                              messages.ERROR)
            return None
        return django_delete_selected(self, request, queryset)


for model, model_admin in ((User, UserAdmin), (Group, GroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
