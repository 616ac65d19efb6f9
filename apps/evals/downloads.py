"""A run's raw output folder as a zip, streamed file by file (never the whole zip in memory).

Nothing is left out or redacted, but symlinks are refused: they are skipped (and listed in SKIPPED.txt inside the
zip), and files are opened with O_NOFOLLOW, so a link planted in the folder cannot read anything outside it.
"""

from __future__ import annotations

import os
import stat
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from django.http import StreamingHttpResponse

CHUNK = 1 << 16


class _Sink:
    """A non-seekable file zipfile writes into; the stream drains it after each piece."""

    def __init__(self):
        self._parts: list[bytes] = []
        self._written = 0

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        self._written += len(data)
        return len(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def run_folder(run_id: int) -> Path | None:
    """The run's output folder when there is one to download (a symlinked folder counts as none)."""
    from .hosts import local_run_dir  # hosts brings sshexec and the AISBench driver: only when downloading

    root = local_run_dir(run_id)
    return root if root.is_dir() and not root.is_symlink() else None


def tree(root: Path) -> tuple[list[Path], list[str]]:
    """Regular files below root, in order, and what was refused (relative paths with the reason)."""
    files, refused = [], []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in sorted(dirnames):
            if (base / name).is_symlink():
                refused.append(f"{(base / name).relative_to(root)}: symlink")
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
        for name in sorted(filenames):
            path = base / name
            if path.is_symlink():
                refused.append(f"{path.relative_to(root)}: symlink")
            elif not path.is_file():
                refused.append(f"{path.relative_to(root)}: not a regular file")
            else:
                files.append(path)
    return files, refused


def _zip_info(name: str, st: os.stat_result) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.localtime(max(st.st_mtime, 315532800))[:6])  # zip starts in 1980
    info.compress_type = zipfile.ZIP_DEFLATED
    info.file_size = st.st_size
    info.external_attr = (st.st_mode & 0xFFFF) << 16
    return info


def zip_stream(root: Path, top: str) -> Iterator[bytes]:
    sink = _Sink()
    files, refused = tree(root)
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            relative = path.relative_to(root).as_posix()
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as exc:
                refused.append(f"{relative}: {exc.strerror}")
                continue
            with os.fdopen(fd, "rb") as source:
                st = os.fstat(source.fileno())
                if not stat.S_ISREG(st.st_mode):
                    refused.append(f"{relative}: not a regular file")
                    continue
                with archive.open(_zip_info(f"{top}/{relative}", st), "w") as target:
                    while chunk := source.read(CHUNK):
                        target.write(chunk)
                        yield sink.drain()
            yield sink.drain()
        if refused:
            archive.writestr(f"{top}/SKIPPED.txt", "Left out of this zip:\n" + "".join(f"{r}\n" for r in refused))
    yield sink.drain()


def zip_response(run_id: int, root: Path) -> StreamingHttpResponse:
    top = f"eval-{run_id}"
    response = StreamingHttpResponse((part for part in zip_stream(root, top) if part),
                                     content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{top}.zip"'
    return response
