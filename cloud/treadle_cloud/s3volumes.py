"""The S3-prefix adapter of the Volume port (the cloud shape).

A run's iterations run on different Lambda instances, so `/tmp` cannot hold a workspace between
them (and EFS does not combine with SnapStart): each volume is the prefix
`<prefix>/<location>/` of one bucket, each file one object. PutObject is atomic, so a write is
seen whole or not at all. Listings (Glob, Grep) page through ListObjectsV2 up to the caller's
limit; reads are ranged GetObjects of at most the bytes asked for. S3 has no symlinks and no
directories, and a key is only ever built from a derived location plus a clean relative path
(`treadle.volumes.paths`), so nothing can lead out of a volume. There is no local directory to
run a command in: `supports_exec` is False and Bash refuses. A conditional write (volumes/base.py)
is S3's own: PutObject with If-Match (the ETag `stat` reported) or If-None-Match: *, so S3
itself refuses a stale writer's object (412 → FileChanged).

boto3 is synchronous: every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from treadle.volumes.base import Entry, FileChanged, FileMissing, Listing, VolumeError

PAGE = 1000


class S3VolumeStorage:
    kind = "s3"
    supports_exec = False

    def __init__(self, client: Any, bucket: str, prefix: str = "volumes") -> None:
        """`client`: a boto3 S3 client, or a function making one on first use (boto3's import
        stays out of a cold start that never touches a file)."""
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    @property
    def client(self) -> Any:
        if not hasattr(self._client, "put_object"):  # the factory: make the client now
            self._client = self._client()
        return self._client

    def _key(self, location: str, path: str = "") -> str:
        base = f"{self.prefix}/{location}" if self.prefix else location
        return f"{base}/{path}" if path else f"{base}/"

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
        raise VolumeError("S3 volumes have no local directory (Bash is unavailable in the cloud shape)")

    # -- the work --------------------------------------------------------------------------------

    def _write(self, location: str, path: str, data: bytes, if_match: str | None, if_absent: bool) -> None:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(location, path), "Body": data}
        if if_match is not None:
            args["IfMatch"] = if_match
        elif if_absent:
            args["IfNoneMatch"] = "*"
        try:
            self.client.put_object(**args)
        except self.client.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            # 412: not that version any more; 409: a concurrent conditional write won; 404: deleted
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409") or (
                    if_match is not None and _missing(exc)):
                raise FileChanged(f"{path!r} changed since it was read (another writer came first): "
                                  "read it again") from None
            raise

    def _stat(self, location: str, path: str) -> Entry | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(location, path))
        except self.client.exceptions.ClientError as exc:
            if _missing(exc):
                return None
            raise
        return Entry(path, int(head["ContentLength"]), head["LastModified"].timestamp(), head.get("ETag"))

    def _read(self, location: str, path: str, max_bytes: int) -> tuple[bytes, int]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(location, path)}
        if max_bytes <= 0:
            entry = self._stat(location, path)
            if entry is None:
                raise FileMissing(f"file {path!r} not found")
            return b"", entry.size
        args["Range"] = f"bytes=0-{max_bytes - 1}"
        try:
            obj = self.client.get_object(**args)
        except self.client.exceptions.ClientError as exc:
            if _missing(exc):
                raise FileMissing(f"file {path!r} not found") from None
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":  # an empty object
                return b"", 0
            raise
        body = obj["Body"].read()
        total = obj.get("ContentRange", "").rpartition("/")[2]
        size = int(total) if total.isdigit() else int(obj["ContentLength"])
        return body, size

    def _walk(self, location: str, prefix: str, limit: int) -> Listing:
        base = self._key(location)
        if prefix:
            single = self._stat(location, prefix)
            if single is not None:
                return Listing([single], False)
        start = base + (f"{prefix}/" if prefix else "")
        out: list[Entry] = []
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": start, "MaxKeys": min(PAGE, limit - len(out) + 1)}
            if token:
                args["ContinuationToken"] = token
            page = self.client.list_objects_v2(**args)
            for obj in page.get("Contents", []):
                if len(out) >= limit:
                    return Listing(out, True)
                out.append(Entry(obj["Key"][len(base):], int(obj["Size"]), obj["LastModified"].timestamp()))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return Listing(out, False)

    def _delete(self, location: str, path: str) -> bool:
        if self._stat(location, path) is None:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=self._key(location, path))
        return True

    def _purge(self, location: str) -> int:
        base = self._key(location)
        deleted = 0
        while True:
            page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=base, MaxKeys=PAGE)
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if not keys:
                return deleted
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
            deleted += len(keys)


def _missing(exc: Any) -> bool:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")
