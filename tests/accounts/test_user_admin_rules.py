"""Issue 17, user accounts as a script author meets them: nobody locks themself or everyone out (the API and the
Django admin refuse it through apps/accounts/services.py), every user change is audited without its password, a
deactivated user is listed with its role, and a wrong password on POST /api/auth/token/ is a 401."""

import json

import pytest
import yaml
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from apps.accounts.roles import Role, has_role, role_of, set_role, stored_role
from apps.accounts.services import (
    check_admin_change,
    check_users_delete,
    user_create,
    user_delete,
    user_update,
)
from apps.audit.models import AuditEntry
from apps.audit.services import MASK

pytestmark = pytest.mark.django_db
PASSWORD = "s3cret-pass-word"


@pytest.fixture(autouse=True)
def _own_cache(own_cache_prefix):
    """The token endpoint counts failures in Redis: another test or run must not see ours."""


@pytest.fixture
def admin_api(api_client_for):
    return api_client_for("admin")


def text(response) -> str:
    return response.content.decode()


def names(response) -> set[str]:
    """The fields a 400 names, whichever error layout the API uses ({field: [...]} or {"errors": [{field}]})."""
    body = response.json()
    if isinstance(body.get("errors"), list):
        return {e["field"] for e in body["errors"] if e.get("field")}
    return set(body) - {"detail", "non_field_errors"}


def user_entries(**filters):
    return AuditEntry.objects.filter(object_type="auth.user", **filters).order_by("id")


# --- the API refuses a lock-out --------------------------------------------------------------------------------


def test_an_admin_cannot_deactivate_themself(admin_api):
    me = admin_api.user
    response = admin_api.patch(f"/api/users/{me.pk}/", {"is_active": False}, format="json")
    assert response.status_code == 400, response.content
    assert names(response) == {"is_active"} and "cannot deactivate your own account" in text(response)
    me.refresh_from_db()
    assert me.is_active and has_role(me, Role.ADMIN)


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_an_admin_cannot_lower_their_own_role(admin_api, role):
    me = admin_api.user
    response = admin_api.patch(f"/api/users/{me.pk}/", {"role": role}, format="json")
    assert response.status_code == 400, response.content
    assert names(response) == {"role"} and "cannot lower your own role" in text(response)
    assert stored_role(type(me).objects.get(pk=me.pk)) == Role.ADMIN


def test_both_fields_are_named_when_both_are_refused(admin_api):
    me = admin_api.user
    response = admin_api.put(f"/api/users/{me.pk}/", {"username": me.username, "is_active": False, "role": "viewer"},
                             format="json")
    assert response.status_code == 400 and names(response) == {"is_active", "role"}


def test_an_admin_may_still_edit_themself_otherwise(admin_api):
    me = admin_api.user
    response = admin_api.patch(f"/api/users/{me.pk}/", {"email": "me@example.com", "role": "admin",
                                                        "is_active": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["email"] == "me@example.com" and response.json()["role"] == "admin"


def test_an_admin_cannot_delete_themself(admin_api):
    me = admin_api.user
    response = admin_api.delete(f"/api/users/{me.pk}/")
    assert response.status_code == 400, response.content
    assert "cannot delete your own account" in text(response)
    assert type(me).objects.filter(pk=me.pk).exists()


def test_an_admin_may_deactivate_demote_and_delete_another_admin(admin_api, make_user):
    other = make_user("admin", "other-admin")
    assert admin_api.patch(f"/api/users/{other.pk}/", {"is_active": False}, format="json").status_code == 200
    assert admin_api.patch(f"/api/users/{other.pk}/", {"role": "viewer"}, format="json").status_code == 200
    assert admin_api.delete(f"/api/users/{other.pk}/").status_code == 204


def test_demoting_a_superuser_takes_the_superuser_status_too(admin_api, django_user_model):
    root = django_user_model.objects.create_superuser("root", password=PASSWORD)
    set_role(root, Role.ADMIN)
    response = admin_api.patch(f"/api/users/{root.pk}/", {"role": "operator"}, format="json")
    assert response.status_code == 200 and response.json()["role"] == "operator"
    root = django_user_model.objects.get(pk=root.pk)
    assert not root.is_superuser and role_of(root) == Role.OPERATOR


# --- the rule itself (apps/accounts/services.py), for callers that are not an active admin -------------------------


def test_the_last_active_admin_is_never_deactivated_demoted_or_deleted(make_user):
    last = make_user("admin", "last-admin")
    gone = make_user("admin", "gone-admin")
    gone.is_active = False
    gone.save()  # an inactive admin does not count
    with pytest.raises(ValidationError) as refused:
        check_admin_change(None, last, is_active=False)
    assert list(refused.value.message_dict) == ["is_active"]
    assert "last-admin is the last active admin" in refused.value.message_dict["is_active"][0]
    with pytest.raises(ValidationError) as refused:
        check_admin_change(None, last, role=Role.OPERATOR)
    assert list(refused.value.message_dict) == ["role"]
    with pytest.raises(ValidationError, match="last active admin"):
        check_users_delete(None, [last])
    with pytest.raises(ValidationError):
        user_update(None, last, is_active=False)
    with pytest.raises(ValidationError):
        user_delete(None, last)
    last.refresh_from_db()
    assert last.is_active and role_of(last) == Role.ADMIN
    check_admin_change(None, last, is_active=True, role=Role.ADMIN)  # keeping it as it is passes


def test_with_another_active_admin_it_may_go(make_user):
    first, second = make_user("admin", "first-admin"), make_user("admin", "second-admin")
    user_update(None, first, role=Role.VIEWER)
    assert role_of(first) == Role.VIEWER
    with pytest.raises(ValidationError):
        user_update(None, second, is_active=False)  # now the last one
    third = make_user("admin", "third-admin")
    user_update(None, second, is_active=False)  # third is left
    with pytest.raises(ValidationError, match="last active admin"):
        check_users_delete(None, [first, third])


def test_a_superuser_outside_the_admin_group_counts_as_an_admin(make_user, django_user_model):
    last = make_user("admin", "group-admin")
    django_user_model.objects.create_superuser("root", password=PASSWORD)
    check_admin_change(None, last, is_active=False)  # root is still there


# --- a deactivated user keeps its role in the listing, but may do nothing ----------------------------------------


def test_a_deactivated_user_is_listed_with_its_role_but_has_no_rights(admin_api, make_user):
    operator = make_user("operator", "idle-operator")
    assert admin_api.patch(f"/api/users/{operator.pk}/", {"is_active": False}, format="json").status_code == 200
    listed = {u["username"]: u for u in admin_api.get("/api/users/").json()["results"]}
    assert listed["idle-operator"]["role"] == "operator" and listed["idle-operator"]["is_active"] is False
    assert admin_api.get(f"/api/users/{operator.pk}/").json()["role"] == "operator"
    operator.refresh_from_db()
    assert role_of(operator) is None and not has_role(operator, Role.VIEWER)
    assert stored_role(operator) == Role.OPERATOR


def test_a_user_in_no_role_group_is_listed_with_null(admin_api, make_user):
    make_user(None, "nobody")
    listed = {u["username"]: u for u in admin_api.get("/api/users/").json()["results"]}
    assert listed["nobody"]["role"] is None


def test_a_role_is_required_on_create_and_null_is_refused(admin_api):
    response = admin_api.post("/api/users/", {"username": "eve"}, format="json")
    assert response.status_code == 400 and "role" in names(response)
    response = admin_api.post("/api/users/", {"username": "eve", "role": None}, format="json")
    assert response.status_code == 400 and "role" in names(response) and "choose a role" in text(response)


# --- every user change is audited, never its password -------------------------------------------------------------


def _no_secret(entry, *secrets):
    text = json.dumps(entry.changes)
    for secret in secrets:
        assert secret not in text


def test_create_change_and_delete_through_the_api_are_audited(admin_api):
    created = admin_api.post("/api/users/", {"username": "carol", "email": "carol@example.com", "role": "operator",
                                             "password": "carols-first-password"}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    (entry,) = user_entries(action="create")
    assert entry.username == admin_api.user.username and entry.object_id == str(pk) and entry.object_repr == "carol"
    assert entry.changes["role"] == [None, "operator"] and entry.changes["username"] == [None, "carol"]
    assert entry.changes["password"] == ["", MASK]
    carol = type(admin_api.user).objects.get(pk=pk)
    _no_secret(entry, "carols-first-password", carol.password)

    assert admin_api.patch(f"/api/users/{pk}/", {"role": "viewer", "password": "carols-second-password"},
                           format="json").status_code == 200
    (entry,) = user_entries(action="update")
    assert entry.changes == {"role": ["operator", "viewer"], "password": [MASK, MASK]}
    carol.refresh_from_db()
    _no_secret(entry, "carols-second-password", carol.password)

    assert admin_api.patch(f"/api/users/{pk}/", {"is_active": False}, format="json").status_code == 200
    assert user_entries(action="update").last().changes == {"is_active": [True, False]}
    assert admin_api.patch(f"/api/users/{pk}/", {"is_active": False}, format="json").status_code == 200
    assert user_entries(action="update").count() == 2  # nothing changed: nothing to record

    assert admin_api.delete(f"/api/users/{pk}/").status_code == 204
    (entry,) = user_entries(action="delete")
    assert entry.object_id == str(pk) and entry.object_repr == "carol"
    assert entry.changes["role"] == ["viewer", None] and entry.changes["password"] == [MASK, ""]


def test_a_refused_change_writes_no_entry(admin_api):
    admin_api.patch(f"/api/users/{admin_api.user.pk}/", {"is_active": False}, format="json")
    admin_api.delete(f"/api/users/{admin_api.user.pk}/")
    assert not user_entries().exists()


def test_a_user_made_without_a_password_says_none_was_set(admin_api):
    assert admin_api.post("/api/users/", {"username": "dave", "role": "viewer"}, format="json").status_code == 201
    assert "password" not in user_entries(action="create").get().changes


def test_the_services_audit_for_any_caller(make_user):
    actor = make_user("admin", "shell-admin")
    user = user_create(actor, username="frank", role=Role.VIEWER)
    assert user_entries(action="create").get().username == "shell-admin"
    user_update(actor, user, role=Role.OPERATOR)
    assert user_entries(action="update").get().changes == {"role": ["viewer", "operator"]}


# --- the Django admin keeps the same rule, and audits too ---------------------------------------------------------


@pytest.fixture
def root(django_user_model):
    user = django_user_model.objects.create_superuser("root", password=PASSWORD)
    set_role(user, Role.ADMIN)
    return user


@pytest.fixture
def helpdesk(make_user):
    """Staff with the Django permissions to edit users, but not an admin in this application."""
    user = make_user(None, "helpdesk")
    user.is_staff = True
    user.save()
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="auth",
                                                         codename__in=["view_user", "change_user", "delete_user"]))
    return user


def browser_for(user) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def change_form(user, **overrides) -> dict:
    data = {"username": user.username, "first_name": user.first_name, "last_name": user.last_name,
            "email": user.email, "groups": [g.pk for g in user.groups.all()], "user_permissions": [],
            "date_joined_0": user.date_joined.strftime("%Y-%m-%d"), "date_joined_1": "00:00:00",
            "last_login_0": "", "last_login_1": "", "_save": "Save"}
    for flag in ("is_active", "is_staff", "is_superuser"):
        if getattr(user, flag):
            data[flag] = "on"
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_the_admin_change_form_refuses_deactivating_yourself(root):
    page = browser_for(root).post(f"/admin/auth/user/{root.pk}/change/", change_form(root, is_active=None))
    assert page.status_code == 200  # the form again, with the error
    assert "cannot deactivate your own account" in page.content.decode()
    root.refresh_from_db()
    assert root.is_active


def test_the_admin_change_form_refuses_lowering_your_own_role(root):
    # get_or_create: a transactional test run before this one in the same worker flushes the migration's groups.
    viewer_group, _ = root.groups.model.objects.get_or_create(name="viewer")
    page = browser_for(root).post(f"/admin/auth/user/{root.pk}/change/",
                                  change_form(root, is_superuser=None, groups=[viewer_group.pk]))
    assert page.status_code == 200 and "cannot lower your own role" in page.content.decode()
    root.refresh_from_db()
    assert root.is_superuser and stored_role(root) == Role.ADMIN


def test_the_admin_change_form_refuses_the_last_admin_and_audits_what_it_saves(root, helpdesk):
    browser = browser_for(helpdesk)
    page = browser.post(f"/admin/auth/user/{root.pk}/change/", change_form(root, is_active=None))
    assert page.status_code == 200 and "root is the last active admin" in page.content.decode()
    page = browser.post(f"/admin/auth/user/{root.pk}/change/",
                        change_form(root, is_superuser=None, groups=[]))
    assert page.status_code == 200 and "root is the last active admin" in page.content.decode()
    root.refresh_from_db()
    assert root.is_active and root.is_superuser
    assert not user_entries().exists()

    page = browser.post(f"/admin/auth/user/{root.pk}/change/", change_form(root, email="root@example.com"))
    assert page.status_code == 302, page.content.decode()[:2000]
    entry = user_entries(action="update").get()
    assert entry.username == "helpdesk" and entry.changes == {"email": ["", "root@example.com"]}


def test_the_admin_delete_page_and_action_refuse_too(root, helpdesk, make_user):
    page = browser_for(root).post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}, follow=True)
    assert "cannot delete your own account" in page.content.decode()
    page = browser_for(helpdesk).post(f"/admin/auth/user/{root.pk}/delete/", {"post": "yes"}, follow=True)
    assert "root is the last active admin" in page.content.decode().lower()  # the admin capitalises messages
    victim = make_user("viewer", "victim")
    page = browser_for(root).post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                        "_selected_action": [root.pk, victim.pk]}, follow=True)
    assert "cannot delete your own account" in page.content.decode()
    assert type(root).objects.filter(pk__in=[root.pk, victim.pk]).count() == 2

    page = browser_for(root).post("/admin/auth/user/", {"action": "delete_selected", "post": "yes",
                                                        "_selected_action": [victim.pk]}, follow=True)
    assert page.status_code == 200 and not type(root).objects.filter(pk=victim.pk).exists()
    assert user_entries(action="delete").get().object_repr == "victim"
    browser_for(root).post(f"/admin/auth/user/{helpdesk.pk}/delete/", {"post": "yes"})
    assert not type(root).objects.filter(pk=helpdesk.pk).exists()
    assert user_entries(action="delete").count() == 2


def test_the_admin_password_page_is_audited_masked(root, make_user):
    victim = make_user("viewer", "forgetful")
    page = browser_for(root).post(f"/admin/auth/user/{victim.pk}/password/",
                                  {"password1": "a-brand-new-password", "password2": "a-brand-new-password",
                                   "usable_password": "true"})
    assert page.status_code == 302, page.content.decode()[:2000]
    entry = user_entries(action="update").get()
    assert entry.changes == {"password": [MASK, MASK]}
    victim.refresh_from_db()
    _no_secret(entry, "a-brand-new-password", victim.password)


def test_the_admin_add_page_is_audited(root):
    page = browser_for(root).post("/admin/auth/user/add/", {"username": "newbie", "password1": "newbies-password-1",
                                                            "password2": "newbies-password-1",
                                                            "usable_password": "true", "_save": "Save"})
    assert page.status_code == 302, page.content.decode()[:2000]
    entry = user_entries(action="create").get()
    assert entry.object_repr == "newbie" and entry.changes["password"] == ["", MASK]


def test_the_role_groups_cannot_be_renamed_or_deleted_in_the_admin(root):
    admin_group, _ = root.groups.model.objects.get_or_create(name="admin")
    browser = browser_for(root)
    assert browser.post(f"/admin/auth/group/{admin_group.pk}/delete/", {"post": "yes"}).status_code == 403
    page = browser.post("/admin/auth/group/", {"action": "delete_selected", "post": "yes",
                                               "_selected_action": [admin_group.pk]}, follow=True)
    assert "cannot be deleted" in page.content.decode()
    browser.post(f"/admin/auth/group/{admin_group.pk}/change/", {"name": "renamed", "_save": "Save"})
    admin_group.refresh_from_db()
    assert admin_group.name == "admin"


# --- POST /api/auth/token/: a wrong password is a 401 --------------------------------------------------------------


def token(body, ip="10.0.17.1"):
    return APIClient().post("/api/auth/token/", body, format="json", REMOTE_ADDR=ip)


def test_a_wrong_password_is_a_401_saying_so(make_user):
    make_user("viewer", "alice", password=PASSWORD)
    response = token({"username": "alice", "password": "wrong"})
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    assert "Wrong user name or password (or the account is deactivated)." in text(response)
    assert token({"username": "nobody-by-this-name", "password": "wrong"}).status_code == 401
    assert token({"username": "alice", "password": PASSWORD}).status_code == 200


def test_a_deactivated_account_is_a_401(make_user):
    user = make_user("viewer", "former", password=PASSWORD)
    user.is_active = False
    user.save()
    assert token({"username": "former", "password": PASSWORD}).status_code == 401


@pytest.mark.parametrize("body,field", [({"username": "alice"}, "password"), ({"password": "x"}, "username"),
                                        ({"username": "", "password": "x"}, "username")])
def test_a_missing_field_is_still_a_400_naming_it(make_user, body, field):
    make_user("viewer", "alice", password=PASSWORD)
    response = token(body)
    assert response.status_code == 400 and field in names(response)


def test_the_schema_documents_the_401(api_client_for):
    schema = yaml.safe_load(api_client_for("viewer").get("/api/schema/").content)
    responses = schema["paths"]["/api/auth/token/"]["post"]["responses"]
    assert {"200", "400", "401", "429"} <= set(responses)
    assert "role" in json.dumps(schema["components"]["schemas"]["User"])
