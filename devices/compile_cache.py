"""The on-disk compile cache: object code and the program that runs it, per module.

An entry's key is a hash of the module's text, the lazyarray version, the LLVM version
and the target (CPU name and features): any of them changing gives a new entry. Files:

    <dir>/<key[:2]>/<key>.bin = MAGIC | sha256(payload) | payload
    payload = len(head) as 8 bytes | head (JSON) | object code
    head = {"key", "versions", "meta"}

Object code from this cache is loaded and run, so the cache trusts nothing it did not
write itself:

- the directory, each shard directory and each entry must be owned by this user, and
  not writable by group or others, and be what they claim (a directory, a regular file;
  never a symbolic link: entries are opened with O_NOFOLLOW and checked on the open
  descriptor, so a swap after the check changes nothing). Anything else makes the whole
  cache refused: one warning, then every compile runs without it;
- an entry holds its full key and the lazyarray and llvmlite versions that wrote it,
  compared on load: an entry copied over another key, or left by another version, is a
  miss (the SHA-256 only catches damage: anyone who can write the file can recompute it);
- a truncated or inconsistent entry is a miss (recompiled and overwritten), never loaded;
  object code is checked whole (devices/object_code.py `malformed`: the ELF header,
  section table and sections inside the file) before LLVM reads any of it, and an entry
  whose code does not load (cut short, or lacking a function its program names) is
  removed and recompiled.

Entries are written to a temporary file in the same directory and renamed into place
(`os.replace` is atomic), so a reader sees a whole entry or none, and two processes
writing the same entry at once both succeed (the last rename wins; both are the same).

Size: the entries' total is capped (`max_bytes`, LAZYARRAY_CACHE_MAX_MB); a store past
the cap removes the least recently used entries (a hit refreshes an entry's mtime).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
import warnings
from typing import Optional

from ..compiler import program as compiler_program
from ..compiler.program import Program

MAGIC = b"LZAC2\n"
_HASH = 32
DEFAULT_MAX_BYTES = 1 << 30
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

# directory -> why it was refused (warned about once per process)
REFUSED: dict = {}


def entry_key(module_text: str, *context: str) -> str:
    h = hashlib.sha256()
    for part in (module_text,) + context:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def default_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "lazyarray")


# lazyarray's version (pyproject.toml's; tests/test_startup.py checks they agree): read
# from here, not from the installed package's metadata, whose reader (importlib.metadata)
# was ~40 ms of a new process's first cache hit
VERSION = "0.1.0"


@functools.lru_cache(maxsize=None)
def versions() -> dict:
    """The versions an entry records and a load compares."""
    import llvmlite
    return {"lazyarray": VERSION, "llvmlite": llvmlite.__version__}


@functools.lru_cache(maxsize=None)
def compiler_fingerprint() -> str:
    """What pins an entry to the code that wrote it: the compiler's and the devices'
    sources (a development checkout between two commits never loads another's entries)."""
    return source_fingerprint(os.path.dirname(os.path.abspath(compiler_program.__file__)),
                              os.path.dirname(os.path.abspath(__file__)))


def source_fingerprint(*roots: str) -> str:
    """A hash of the .py files under `roots`, read from their names, sizes and
    modification and change times rather than their contents (~1 ms instead of ~25 ms of
    a new process's first sync): any write to a file sets its change time, which no one
    can set back, so edited code never matches an old entry; a checkout or reinstall of
    unchanged code only costs one recompile."""
    h = hashlib.sha256()
    for root in roots:
        for folder, subfolders, files in os.walk(root):
            subfolders.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                st = os.stat(os.path.join(folder, name))
                h.update(f"{folder[len(root):]}/{name} {st.st_size} {st.st_mtime_ns} "
                         f"{st.st_ctime_ns}\0".encode())
    return h.hexdigest()


def load_cached(cache: "DiskCache", key: str) -> Optional[Program]:
    """The Program stored under `key`, or None (missing, corrupt, or an older layout)."""
    hit = cache.load(key)
    if hit is None:
        return None
    try:
        return Program.from_cache(*hit)
    except (KeyError, TypeError, ValueError):
        return None


def untrusted(st: os.stat_result, kind: str) -> Optional[str]:
    """Why a file or directory with this (l)stat must not be trusted, or None."""
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not want(st.st_mode):
        return f"is not a {kind}" + (" (a symbolic link)" if stat.S_ISLNK(st.st_mode) else "")
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {oct(stat.S_IMODE(st.st_mode))})"
    return None


class DiskCache:
    def __init__(self, directory: str, max_bytes: Optional[int] = None) -> None:
        self.directory = directory
        self.max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)

    # ---- trust ------------------------------------------------------------------------

    @property
    def refused(self) -> bool:
        return self.directory in REFUSED

    def _refuse(self, path: str, reason: str) -> None:
        if self.directory not in REFUSED:
            REFUSED[self.directory] = f"{path} {reason}"
            warnings.warn(f"lazyarray: not using the compile cache {self.directory!r}: {path} "
                          f"{reason}; compiling without the disk cache (fix or remove it, or "
                          f"set LAZYARRAY_CACHE_DIR)", RuntimeWarning, stacklevel=2)

    def _trusted_dir(self, path: str) -> bool:
        """True when `path` is a directory this cache may use; False when missing;
        refuses the cache (and returns False) when it exists but is not trusted."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError as e:
            self._refuse(path, f"cannot be checked ({e.strerror})")
            return False
        why = untrusted(st, "directory")
        if why:
            self._refuse(path, why)
            return False
        return True

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".bin")

    # ---- load -------------------------------------------------------------------------

    def load(self, key: str) -> Optional[tuple]:
        """(meta dict, object code) for key, or None (missing, refused, truncated, corrupt,
        written for another key or by other versions)."""
        if self.refused:
            return None
        path = self._path(key)
        if not (self._trusted_dir(self.directory) and self._trusted_dir(os.path.dirname(path))):
            return None
        data = self._read(path)
        return None if data is None else self._decode(key, data)

    def _read(self, path: str) -> Optional[bytes]:
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as e:         # ELOOP: a symbolic link planted in place of an entry
            self._refuse(path, f"cannot be opened safely ({e.strerror})")
            return None
        try:
            why = untrusted(os.fstat(fd), "regular file")
            if why:
                self._refuse(path, why)
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
            try:
                os.utime(fd)         # least recently used = oldest mtime
            except OSError:
                pass
            return data
        except OSError:
            return None
        finally:
            os.close(fd)

    @staticmethod
    def _decode(key: str, data: bytes) -> Optional[tuple]:
        head_len = len(MAGIC)
        if len(data) < head_len + _HASH + 8 or data[:head_len] != MAGIC:
            return None
        digest, payload = data[head_len:head_len + _HASH], data[head_len + _HASH:]
        if hashlib.sha256(payload).digest() != digest:
            return None
        size = int.from_bytes(payload[:8], "little")
        if 8 + size > len(payload):
            return None
        try:
            head = json.loads(payload[8:8 + size].decode())
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(head, dict) or head.get("key") != key \
                or head.get("versions") != versions() or not isinstance(head.get("meta"), dict):
            return None
        obj = payload[8 + size:]
        if head.get("obj_bytes") != len(obj):
            return None
        return head["meta"], obj

    # ---- store ------------------------------------------------------------------------

    def store(self, key: str, meta: dict, obj: bytes) -> bool:
        """Write an entry atomically; False (and no entry) if the directory is unusable."""
        if self.refused:
            return False
        head = {"key": key, "versions": versions(), "obj_bytes": len(obj), "meta": meta}
        head_bytes = json.dumps(head, separators=(",", ":")).encode()
        payload = len(head_bytes).to_bytes(8, "little") + head_bytes + obj
        data = MAGIC + hashlib.sha256(payload).digest() + payload
        path = self._path(key)
        try:
            for d in (self.directory, os.path.dirname(path)):
                if not self._trusted_dir(d):
                    if self.refused:
                        return False
                    os.makedirs(d, mode=0o700, exist_ok=True)
                    if not self._trusted_dir(d):
                        return False
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                _remove(tmp)
                raise
        except OSError:
            return False
        self.evict()
        return True

    def remove(self, key: str) -> None:
        """Drop an entry that was read whole but does not load (its code is damaged)."""
        if not self.refused:
            _remove(self._path(key))

    def evict(self) -> None:
        """Remove the least recently used entries until the total is within max_bytes."""
        entries, total = [], 0
        try:
            shards = [e for e in os.scandir(self.directory) if e.is_dir(follow_symlinks=False)]
            for shard in shards:
                for e in os.scandir(shard.path):
                    if e.name.endswith(".bin") and e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        entries.append((st.st_mtime_ns, st.st_size, e.path))
                        total += st.st_size
        except OSError:
            return
        entries.sort()
        for _, size, p in entries:
            if total <= self.max_bytes:
                break
            _remove(p)
            total -= size


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
