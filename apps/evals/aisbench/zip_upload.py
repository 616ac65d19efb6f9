"""An uploaded zip, unpacked into a temporary folder that is deleted afterwards. Refused (OutputError naming the zip
and the member): a member path that is absolute or climbs with "..", a symlink or other non-regular file, an
encrypted member, more than MAX_MEMBERS members, a member over MAX_MEMBER_BYTES or a total over MAX_TOTAL_BYTES
unpacked. The sizes the zip declares are checked before anything is written: zipfile never unpacks a member past
its declared size (ZipExtFile._read1 cuts there, and the CRC check then fails)."""

from __future__ import annotations

import io
import re
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from apps.evals.aisbench.output_files import OutputError

MAX_TOTAL_BYTES = 500 * 2**20
MAX_MEMBER_BYTES = 200 * 2**20
MAX_MEMBERS = 20_000
# what zipfile raises on a damaged or unusual zip (a bad header, an unknown version or method, a password)
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, NotImplementedError, RuntimeError,
              zlib.error, struct.error)


@contextmanager
def unpacked(name: str, data: bytes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="aisbench-import-") as folder:
        unpack(name, data, Path(folder))
        yield Path(folder)


def unpack(name: str, data: bytes, target: Path) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (*ZIP_ERRORS, OSError) as e:
        raise OutputError(name, "", f"is not a readable zip file ({e})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise OutputError(name, "", f"holds {len(members):,} files, more than {MAX_MEMBERS:,}")
        parts = {member.filename: member_parts(name, member) for member in members}
        if sum(member.file_size for member in members) > MAX_TOTAL_BYTES:
            raise OutputError(name, "", f"unpacks to more than {MAX_TOTAL_BYTES // 2**20} MB: refused")
        written: set[tuple[str, ...]] = set()
        for member in members:
            if member.is_dir():
                continue
            if tuple(parts[member.filename]) in written:
                raise OutputError(name, member.filename[:200], "is in the zip twice: refused")
            written.add(tuple(parts[member.filename]))
            try:
                copy_member(archive, member, target.joinpath(*parts[member.filename]))
            except OSError as e:
                raise OutputError(name, member.filename[:200], f"cannot be unpacked ({e.strerror})") from None
            except ZIP_ERRORS as e:
                raise OutputError(name, member.filename[:200], f"cannot be unpacked ({e})") from None


def member_parts(name: str, member: zipfile.ZipInfo) -> list[str]:
    where = member.filename[:200]
    if "\0" in member.filename or re.match(r"^(?:[\\/]|[A-Za-z]:)", member.filename):
        raise OutputError(name, where, "is an absolute path: refused")
    parts = [p for p in re.split(r"[\\/]", member.filename) if p not in ("", ".")]
    if ".." in parts:
        raise OutputError(name, where, "climbs out of the folder with '..': refused")
    kind = stat.S_IFMT(member.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise OutputError(name, where, "is a symbolic link: refused")
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise OutputError(name, where, "is not a regular file: refused")
    if member.flag_bits & 0x1:
        raise OutputError(name, where, "is encrypted: refused")
    if member.file_size > MAX_MEMBER_BYTES:
        raise OutputError(name, where, f"unpacks to more than {MAX_MEMBER_BYTES // 2**20} MB: refused")
    return parts


def copy_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as source, path.open("xb") as out:
        shutil.copyfileobj(source, out)
