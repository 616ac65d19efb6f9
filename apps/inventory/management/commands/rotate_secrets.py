"""manage.py rotate_secrets: re-encrypt every stored secret with the first key of PDCP_SECRETS_KEY."""

from django.core.management.base import BaseCommand, CommandError

from apps.inventory.secrets import UNDECRYPTABLE
from apps.inventory.secrets_rotation import secrets_rotate


class Command(BaseCommand):
    help = ("Re-encrypt every stored secret (SSH credentials, proxy admin tokens) with the first key of "
            "PDCP_SECRETS_KEY, in one transaction. Put the new key first and keep the old ones after it "
            "(comma-separated) while this runs; then the old keys can be removed.")

    def handle(self, *args, **options):
        report = secrets_rotate()
        undecryptable = 0
        for rotation in report:
            self.stdout.write(f"{rotation.label}: {rotation.reencrypted} re-encrypted with the first key"
                              + (f", {len(rotation.undecryptable)} left as stored" if rotation.undecryptable else ""))
            for row in rotation.undecryptable:
                self.stderr.write(f"{rotation.label} {row}: {UNDECRYPTABLE}")
            undecryptable += len(rotation.undecryptable)
        if undecryptable:
            raise CommandError(f"{undecryptable} stored secret(s) could not be decrypted with any key in "
                               "PDCP_SECRETS_KEY and were left as they are (the rest were re-encrypted): "
                               "re-enter them, or add their old key to PDCP_SECRETS_KEY and run again")
