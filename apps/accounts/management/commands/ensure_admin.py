"""manage.py ensure_admin: create the first admin (password from PDCP_ADMIN_PASSWORD, else printed once)."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from apps.accounts.roles import Role, set_role


class Command(BaseCommand):
    help = "Create the admin user if it does not exist yet."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("PDCP_ADMIN_USER", "admin"))

    def handle(self, *args, username, **options):
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            self.stdout.write(f"admin user {username!r} exists")
            return
        password = os.environ.get("PDCP_ADMIN_PASSWORD")
        generated = not password
        password = password or secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
        set_role(user, Role.ADMIN)
        if generated:
            self.stdout.write(self.style.WARNING(
                f"created admin user {username!r} with password: {password}\n"
                "  (shown once; set PDCP_ADMIN_PASSWORD to choose it, or change it in the admin)"))
        else:
            self.stdout.write(f"created admin user {username!r} (password from PDCP_ADMIN_PASSWORD)")
