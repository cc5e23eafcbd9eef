"""Lambda SnapStart: what runs before the snapshot and after each restore.

With SnapStart (the construct's default), a deploy publishes a version, Lambda runs its INIT once —
the handler module's imports — and snapshots the environment; a cold start restores the snapshot
instead of importing again. Only INIT is snapshotted, so:

- before the snapshot, the imports a first invocation would otherwise make (boto3 for SQS and
  Secrets Manager, httpx for the model providers) are made too, so they are in the snapshot;
- nothing that must be unique or fresh is made before it: no database connection (the Runtime
  opens on the first invocation, after the restore), no secrets read;
- after each restore, `random` is reseeded: every environment restored from one snapshot would
  otherwise draw the same numbers (retry jitter, say). Identifiers come from `uuid4`/`secrets`,
  which read the OS's entropy and need nothing.

`snapshot_restore_py` is the Lambda Python runtime's hook registry; outside a SnapStart INIT
nothing here runs.
"""

from __future__ import annotations

import importlib
import logging
import os
import random
from collections.abc import Callable, Iterable

log = logging.getLogger("treadle.cloud")

#: imported into the snapshot: first-invocation imports every function makes (boto3 for the SQS
#: client, Secrets Manager) and the worker's model-provider HTTP client
SNAPSHOT_IMPORTS: tuple[str, ...] = ("boto3", "botocore.config", "httpx")


def snapstart_init() -> bool:
    """Whether this INIT is the one SnapStart snapshots."""
    return os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start"


def after_restore() -> None:
    random.seed()  # from os.urandom: each restored environment draws its own numbers


def prepare_snapshot(
    register_after_restore: Callable[[Callable[[], None]], object] | None = None,
    imports: Iterable[str] = SNAPSHOT_IMPORTS,
) -> bool:
    """At a SnapStart INIT: import `imports` into the snapshot and register `after_restore`.
    Returns whether it did (False outside SnapStart)."""
    if register_after_restore is None:
        if not snapstart_init():
            return False
        from snapshot_restore_py import register_after_restore as registrar

        register_after_restore = registrar
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # a trimmed layer: the invocation imports (or fails) as before
            log.warning("SnapStart: %s is not importable: %s", module, exc)
    register_after_restore(after_restore)
    return True
