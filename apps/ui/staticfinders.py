"""Serves plotly.min.js from the pinned plotly package as /static/vendor/plotly.min.js (4.8 MB we don't commit)."""

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).parent / "package_data"
PUBLIC_NAME = "vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    storage = FileSystemStorage(location=str(PLOTLY_DIR))

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path == PUBLIC_NAME:
            match = str(PLOTLY_DIR / "plotly.min.js")
            return [match] if find_all else match
        return [] if find_all else None

    def list(self, ignore_patterns):
        yield "plotly.min.js", _PrefixedStorage()


class _PrefixedStorage(FileSystemStorage):
    def __init__(self):
        super().__init__(location=str(PLOTLY_DIR))
        self.prefix = "vendor"
