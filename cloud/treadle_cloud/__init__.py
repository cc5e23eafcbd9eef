"""The cloud shape's composition: what the Lambda handlers in `functions/` share.

The core (`treadle`) never imports boto3 or mangum; this package does. Each handler module builds
one function object at import time (`HttpFunction`, `SqsWorker`, `MaintenanceFunction`,
`SchedulerFunction`); each owns a `Container` — the event loop and the `Runtime` that live as
long as the Lambda execution environment — opened on the first invocation.

Environment (set by the CDK construct in `infra/`):

| variable | meaning |
|---|---|
| `TREADLE_QUEUE_URL` | the step queue |
| `DATABASE_URL` | a libpq URL; or `TREADLE_DB_SECRET_ARN` (the RDS secret) + `TREADLE_DB_HOST` (RDS Proxy) |
| `TREADLE_API_TOKEN_SECRET_ARN` | secret whose string is the API bearer token (→ `TREADLE_AUTH_TOKEN`) |
| `TREADLE_PROVIDER_KEYS_SECRET_ARN` | JSON secret `{"ANTHROPIC_API_KEY": "...", ...}` exported to the environment |
| `TREADLE_CONFIG` | the operator YAML shipped with the code |
| `TREADLE_SSE_BUDGET_SECONDS` | how long one SSE response may last (HTTP API cuts at 30 s) |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treadle_cloud.container import Container
    from treadle_cloud.env import CloudSettings

__all__ = ["CloudSettings", "Container"]


def __getattr__(name: str) -> Any:
    """`treadle_cloud.Container` and `.CloudSettings` on first use: importing a submodule (the
    migrate function imports `treadle_cloud.migrate`) must not import the whole Runtime."""
    if name == "Container":
        from treadle_cloud.container import Container

        return Container
    if name == "CloudSettings":
        from treadle_cloud.env import CloudSettings

        return CloudSettings
    raise AttributeError(f"module 'treadle_cloud' has no attribute {name!r}")
