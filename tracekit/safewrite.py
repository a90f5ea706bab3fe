"""How every output is written: whole or not at all, at its own name only.

* A file is written to a temporary name in its own directory, flushed, fsynced, and renamed
  into place only when complete; any failure or interrupt (a full disk, Ctrl-C) removes the
  temporary and leaves what was there before untouched.
* A directory of members (``--out DIR`` for csv/parquet) that does not exist yet is built as a
  temporary directory beside it and renamed into place whole; an existing directory has its
  members replaced one by one, each atomically, after every member's name was checked.
* Outputs get the permissions of any new file (0666 / 0777 less the umask: 0644 and 0755 under
  the usual 022), since a report is meant to be shared; the temporary names ``mkstemp`` and
  ``mkdtemp`` create 0600 / 0700 are opened up before the rename. A file replaced keeps its mode.
* Nothing is written through a link: a symbolic link (existing or dangling) at an output's name
  is refused, as are FIFOs, sockets and devices (which would block or never end), so an output
  replaces what is at its own name and nothing else.

Refusals and failures raise :class:`OutputError`, one line that names the output.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import TraceError


class OutputError(TraceError):
    """An output that cannot or must not be written (a link, a FIFO, a full disk)."""


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux), else
    by setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _new_mode(path: Path, base: int) -> int:
    """The mode an output at ``path`` gets: the mode of the regular file it replaces, else
    ``base`` (0o666 files, 0o777 directories) less the umask."""
    try:
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return base & ~_umask()


def check_file_target(path: Path) -> None:
    """Refuse to write ``path`` when a link, directory or special file is at that name."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(path, f"cannot write ({e.strerror or e})") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(path, "is a symbolic link; refused (outputs never write through links)")
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(path, "is a directory; refused")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(path, "is not a regular file (a FIFO, socket or device?); refused")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _failed(path: Path, e: OSError) -> OutputError:
    return OutputError(path, f"cannot write ({e.strerror or e})")


@contextmanager
def atomic_file(path: str | os.PathLike, sync_dir: bool = True) -> Iterator[IO[bytes]]:
    """A binary file object whose content appears at ``path`` only if the block completes.
    ``sync_dir=False`` (cache entries) skips the fsync of the directory after the rename: the
    content is whole either way, only the rename may be lost in a crash (a cache miss)."""
    path = Path(path)
    check_file_target(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:80]}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _failed(path, e) from None
    try:
        os.chmod(tmp, _new_mode(path, 0o666))  # mkstemp's 0600 would keep a shared report private
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        check_file_target(path)  # nothing may have been planted there meanwhile
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, TraceError):
            raise _failed(path, e) from None
        raise
    if sync_dir:
        _fsync_dir(folder)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8", errors="replace"))


Writer = Callable[[IO[bytes]], None]


def write_members(out_dir: str | os.PathLike, members: dict[str, Writer]) -> list[Path]:
    """Write ``{file name: writer(f)}`` into ``out_dir``: a new directory appears whole or not
    at all; in an existing one each member is replaced atomically (names checked first)."""
    out_dir = Path(out_dir)
    try:
        st = os.lstat(out_dir)
    except FileNotFoundError:
        return _new_directory(out_dir, members)
    except OSError as e:
        raise _failed(out_dir, e) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(out_dir, "is a symbolic link; refused (outputs never write through links)")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(out_dir, "is not a directory; refused")
    for name in members:
        check_file_target(out_dir / name)
    paths = []
    for name, writer in members.items():
        with atomic_file(out_dir / name) as f:
            writer(f)
        paths.append(out_dir / name)
    return paths


def _new_directory(out_dir: Path, members: dict[str, Writer]) -> list[Path]:
    parent = out_dir.parent if str(out_dir.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name[:80]}.", suffix=".tmp", dir=parent))
    except OSError as e:
        raise _failed(out_dir, e) from None
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would keep a shared report private
        for name, writer in members.items():
            with open(tmp / name, "xb") as f:
                writer(f)
                f.flush()
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, out_dir)  # fails if something appeared at out_dir meanwhile
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and not isinstance(e, TraceError):
            raise _failed(out_dir, e) from None
        raise
    _fsync_dir(parent)
    return [out_dir / name for name in members]
