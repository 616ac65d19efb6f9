"""manage.py ensure_admin: create the first admin, and tell a returning user how to get in.

The password comes from PDCP_ADMIN_PASSWORD, or is generated, printed and kept in <data dir>/admin-password
(mode 0600) so a later `make run` can say where it is. On the development setup (or with --reset-password)
PDCP_ADMIN_PASSWORD also resets an existing admin's password.
"""

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from apps.accounts.roles import Role, set_role


def password_file() -> Path:
    return Path(settings.DATA_DIR) / "admin-password"


def _keep_generated(password: str) -> Path:
    path = password_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    return path


class Command(BaseCommand):
    help = "Create the admin user if it does not exist yet; reset its password from PDCP_ADMIN_PASSWORD."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("PDCP_ADMIN_USER", "admin"))
        parser.add_argument("--reset-password", action="store_true",
                            help="set an existing admin's password from PDCP_ADMIN_PASSWORD (implied in development)")

    def handle(self, *args, username, reset_password, **options):
        User = get_user_model()
        password = os.environ.get("PDCP_ADMIN_PASSWORD")
        user = User.objects.filter(username=username).first()
        if user is None:
            self._create(User, username, password)
        elif password and (reset_password or not settings.PRODUCTION):
            user.set_password(password)
            user.save(update_fields=["password"])
            password_file().unlink(missing_ok=True)
            self.stdout.write(f"admin user {username!r}: password reset from PDCP_ADMIN_PASSWORD")
        else:
            self._remind(user, username, ignored=bool(password))

    def _create(self, User, username: str, password: str | None) -> None:
        generated = not password
        password = password or secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
        set_role(user, Role.ADMIN)
        if not generated:
            self.stdout.write(f"created admin user {username!r} (password from PDCP_ADMIN_PASSWORD)")
            return
        path = _keep_generated(password)
        self.stdout.write(self.style.WARNING(
            f"created admin user {username!r} with password: {password}\n"
            f"  (also kept in {path}, readable by you only; set PDCP_ADMIN_PASSWORD to choose another)"))

    def _remind(self, user, username: str, *, ignored: bool) -> None:
        path = password_file()
        kept = path.read_text().strip() if path.is_file() else ""
        if kept and user.check_password(kept):
            where = f"its generated password is in {path}"
        else:
            where = "to set a new password run: PDCP_ADMIN_PASSWORD=<new> make run"
            if settings.PRODUCTION:
                where = ("to set a new password run: PDCP_ADMIN_PASSWORD=<new> "
                         "python manage.py ensure_admin --reset-password")
        note = " (PDCP_ADMIN_PASSWORD ignored in production without --reset-password)" if ignored else ""
        self.stdout.write(f"admin user {username!r} exists; {where}{note}")
