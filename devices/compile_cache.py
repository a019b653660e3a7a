"""The on-disk compile cache: object code and the program that runs it, per module.

An entry's key is a hash of the module's text, the lazyarray version, the LLVM version
and the target (CPU name and features): any of them changing gives a new entry. Files:

    <dir>/<key[:2]>/<key>.bin = MAGIC | sha256(payload) | payload
    payload = len(meta) as 8 bytes | meta (JSON) | object code

Entries are written to a temporary file in the same directory and renamed into place
(`os.replace` is atomic), so a reader sees a whole entry or none, and two processes
writing the same entry at once both succeed (the last rename wins; both are the same).
The hash is checked before anything is loaded: a corrupt or truncated entry counts as a
miss and is recompiled (and overwritten), never loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Optional

MAGIC = b"LZAC1\n"
_HASH = 32


def entry_key(module_text: str, *context: str) -> str:
    h = hashlib.sha256()
    for part in (module_text,) + context:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def default_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "lazyarray")


class DiskCache:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".bin")

    def load(self, key: str) -> Optional[tuple]:
        """(meta dict, object code) for key, or None (missing, truncated or corrupt)."""
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except OSError:
            return None
        head = len(MAGIC)
        if len(data) < head + _HASH + 8 or data[:head] != MAGIC:
            return None
        digest, payload = data[head:head + _HASH], data[head + _HASH:]
        if hashlib.sha256(payload).digest() != digest:
            return None
        size = int.from_bytes(payload[:8], "little")
        if 8 + size > len(payload):
            return None
        try:
            meta = json.loads(payload[8:8 + size].decode())
        except (UnicodeDecodeError, ValueError):
            return None
        return meta, payload[8 + size:]

    def store(self, key: str, meta: dict, obj: bytes) -> bool:
        """Write an entry atomically; False (and no entry) if the directory is unusable."""
        meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
        payload = len(meta_bytes).to_bytes(8, "little") + meta_bytes + obj
        data = MAGIC + hashlib.sha256(payload).digest() + payload
        path = self._path(key)
        try:
            _make_private_dir(self.directory)
            _make_private_dir(os.path.dirname(path))
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
        return True


def _make_private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
