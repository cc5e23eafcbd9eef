"""The host-directory adapter (the sidecar): each volume is a directory under one root.

Every access resolves the real path (following symlinks) and refuses it unless it stays inside
the volume's own directory, so a symlink planted in a volume (by Bash, or by the operator) never
leads out of it. Writes go to a temporary file beside the target, are flushed to disk, and are
renamed into place (atomic on one filesystem). The rename happens under an exclusive `flock` of
the file's directory, which every writer of this adapter takes (in every process on the host):
a conditional write (`if_match` / `if_absent`, volumes/base.py) compares the file's tag and
renames inside it, so no other writer lands in between. This bounds what the file tools can
reach; it is not a defence against a process racing them on the same directory outside treadle
(see docs/workspace.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

from treadle.volumes.base import Entry, FileChanged, FileMissing, Listing, VolumeError
from treadle.volumes.paths import PathRefused

#: how long a write waits for another writer of the same directory (one stopped in the middle
#: of its rename holds it) before it gives up
LOCK_WAIT_S = 30.0


def _tag(st: os.stat_result) -> str:
    """A file's version: every write renames a new inode into place."""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


class HostDirStorage:
    kind = "host"
    supports_exec = True

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # -- the port ----------------------------------------------------------------------------------

    async def stat(self, location: str, path: str) -> Entry | None:
        return await asyncio.to_thread(self._stat, location, path)

    async def read(self, location: str, path: str, max_bytes: int) -> tuple[bytes, int]:
        return await asyncio.to_thread(self._read, location, path, max_bytes)

    async def write(
        self, location: str, path: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> None:
        await asyncio.to_thread(self._write, location, path, data, if_match, if_absent)

    async def walk(self, location: str, prefix: str, limit: int) -> Listing:
        return await asyncio.to_thread(self._walk, location, prefix, limit)

    async def purge(self, location: str) -> int:
        return await asyncio.to_thread(self._purge, location)

    async def delete(self, location: str, path: str) -> bool:
        return await asyncio.to_thread(self._delete, location, path)

    def exec_dir(self, location: str) -> Path:
        return self._volume_root(location, create=True)

    # -- the work --------------------------------------------------------------------------------

    def _volume_root(self, location: str, *, create: bool) -> Path:
        vol = self.root / location
        if create:
            vol.mkdir(parents=True, exist_ok=True, mode=0o700)
        return vol.resolve()

    def _inside(self, vol: Path, path: str) -> Path:
        """The real path of `path` in the volume, refused when it resolves outside it."""
        real = (vol / path).resolve() if path else vol
        if real != vol and vol not in real.parents:
            raise PathRefused(f"path {path!r} resolves outside the volume (a symlink that leaves it)")
        return real

    def _stat(self, location: str, path: str) -> Entry | None:
        vol = self._volume_root(location, create=False)
        if not vol.is_dir():
            return None
        real = self._inside(vol, path)
        try:
            st = real.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not real.is_file():
            return None
        return Entry(path, st.st_size, st.st_mtime, _tag(st))

    def _read(self, location: str, path: str, max_bytes: int) -> tuple[bytes, int]:
        vol = self._volume_root(location, create=False)
        real = self._inside(vol, path) if vol.is_dir() else None
        if real is None or not real.is_file():
            raise FileMissing(f"file {path!r} not found" + (" (it is a directory)" if real and real.is_dir() else ""))
        with open(real, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return f.read(max_bytes), size

    def _write(self, location: str, path: str, data: bytes, if_match: str | None = None,
               if_absent: bool = False) -> None:
        vol = self._volume_root(location, create=True)
        target = vol / path
        # every existing ancestor must resolve inside the volume before anything is created
        for ancestor in reversed(target.parents):
            if ancestor == vol or vol not in ancestor.parents:
                continue
            if ancestor.exists() or ancestor.is_symlink():
                self._inside(vol, str(ancestor.relative_to(vol)))
                if not ancestor.is_dir():
                    raise VolumeError(f"cannot write {path!r}: {ancestor.relative_to(vol)} is a file")
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        parent = self._inside(vol, str(parent.relative_to(vol)) if parent != vol else "")
        if target.is_symlink():
            self._inside(vol, path)  # replaced by the rename below, never followed; refused if it leaves
        if target.is_dir():
            raise VolumeError(f"cannot write {path!r}: it is a directory")
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".treadle-write-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            dir_fd = os.open(parent, os.O_RDONLY)
            try:
                _lock(dir_fd, path)
                if if_match is not None or if_absent:
                    _check(parent / target.name, path, if_match)
                os.replace(tmp, parent / target.name)
                os.fsync(dir_fd)  # the rename itself survives a power loss
            finally:
                os.close(dir_fd)  # and the lock with it
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _walk(self, location: str, prefix: str, limit: int) -> Listing:
        vol = self._volume_root(location, create=False)
        if not vol.is_dir():
            return Listing([], False)
        start = self._inside(vol, prefix)
        if start.is_file():
            st = start.stat()
            return Listing([Entry(prefix, st.st_size, st.st_mtime)], False)
        out: list[Entry] = []
        for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath) / name
                try:
                    real = full.resolve()
                    if real != vol and vol not in real.parents:
                        continue  # a symlink out of the volume: never listed, never opened
                    st = real.stat()
                except OSError:
                    continue
                if not real.is_file() or name.startswith(".treadle-write-"):
                    continue
                if len(out) >= limit:
                    return Listing(sorted(out, key=lambda e: e.path), True)
                out.append(Entry(full.relative_to(vol).as_posix(), st.st_size, st.st_mtime))
        return Listing(sorted(out, key=lambda e: e.path), False)

    def _delete(self, location: str, path: str) -> bool:
        vol = self._volume_root(location, create=False)
        if not vol.is_dir():
            return False
        real = self._inside(vol, path)
        if not real.is_file():
            return False
        dir_fd = os.open(real.parent, os.O_RDONLY)
        try:
            _lock(dir_fd, path)  # not under a writer's rename
            try:
                os.unlink(real)
            except FileNotFoundError:
                return False
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True

    def _purge(self, location: str) -> int:
        vol = self.root / location
        if not vol.exists():
            return 0
        if vol.is_symlink() or self.root.resolve() not in vol.resolve().parents:
            raise VolumeError(f"refusing to purge {location!r}: not a directory under the volumes root")
        count = sum(len(files) for _d, _s, files in os.walk(vol))
        shutil.rmtree(vol)
        return count



def _lock(dir_fd: int, path: str) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise VolumeError(f"cannot write {path!r}: another writer has held its directory for "
                                  f"{LOCK_WAIT_S:g} s") from None
            time.sleep(0.005)


def _check(target: Path, path: str, if_match: str | None) -> None:
    """Under the directory's lock: the file must still be the version the writer saw."""
    try:
        now: str | None = _tag(target.stat())
    except (FileNotFoundError, NotADirectoryError):
        now = None
    if now != if_match:
        raise FileChanged(f"{path!r} changed since it was read (another writer came first): read it again")
