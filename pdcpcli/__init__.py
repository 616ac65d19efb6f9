"""pdcp: the control plane's command-line client. It talks only to the REST API over HTTP (urllib), never to
Django or the database, so it runs on any machine with Python 3.11 and the server's URL (docs/cli.md)."""

__version__ = "0.1.0"
