"""The cache's seal key (``.seal-key``), trusted only when it is the user's own and private.

Whoever can read the key can seal entries the cache then shows as analyses, and whoever can
replace it (or the directory that holds it) can do the same; so, as ssh does with its keys:

* the cache directory must belong to this user and not be writable by group or others;
* the key must be a regular file (never a FIFO, which would block the open, a symlink or a
  device: it is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``) that
  belongs to this user and has no permission bits for group or others.

:func:`untrusted` says in one line why a cache cannot be trusted (the CLI then runs without
the cache and says so); :func:`read_key` returns no key for such a cache, so that every entry
is a miss and nothing is stored, whoever calls it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KEY_FILE = ".seal-key"
KEY_BYTES = 32
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _owner(st: os.stat_result) -> str | None:
    """Why a file of this status is not this user's own (None when it is)."""
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    return None


def _directory(directory: Path) -> str | None:
    """Why the cache directory cannot be trusted; None when it can (or does not exist yet)."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if (why := _owner(st)) is not None:
        return why
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod go-w)"
    return None


def _key_status(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, socket or device?)"
    if (why := _owner(st)) is not None:
        return why
    if st.st_mode & 0o077:
        return f"is readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod 600)"
    return None


def untrusted(directory: Path) -> str | None:
    """Why the cache at ``directory`` cannot be trusted, in one line; None when it can."""
    why = _directory(directory)
    if why is not None:
        return f"cache directory {os.fspath(directory)} {why}"
    try:
        st = os.lstat(directory / KEY_FILE)
    except FileNotFoundError:
        return None  # made, private, by the first store
    except OSError as e:
        return f"cache key {os.fspath(directory / KEY_FILE)} cannot be read ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return f"cache key {os.fspath(directory / KEY_FILE)} is a symbolic link"
    why = _key_status(st)
    return None if why is None else f"cache key {os.fspath(directory / KEY_FILE)} {why}"


def read_key(directory: Path) -> bytes | None:
    """The key of the cache at ``directory``: None when there is none, or when the directory
    or the key cannot be trusted (:func:`untrusted`)."""
    if _directory(directory) is not None:
        return None
    try:
        fd = os.open(directory / KEY_FILE, _OPEN)
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    with open(fd, "rb") as f:
        if _key_status(os.fstat(f.fileno())) is not None:
            return None
        key = f.read(2 * KEY_BYTES)
    return key if len(key) == KEY_BYTES else None


def key(directory: Path, create: bool) -> bytes | None:
    """This cache directory's secret (32 random bytes, mode 0600), made when first needed
    (``create``); never replaces a key another process made meanwhile."""
    got = read_key(directory)
    if got is not None or not create or _directory(directory) is not None:
        return got
    path = directory / KEY_FILE
    tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as f:
        f.write(os.urandom(KEY_BYTES))
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return read_key(directory)
