"""One Lambda execution environment: an event loop and the Runtime on it, kept across invocations.

The psycopg pool belongs to the loop it was opened on, so every invocation runs on the same loop
(`Container.run`). mangum runs the app on `asyncio.get_event_loop()`; `run` and `activate` make
this container's loop the current one first.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from treadle.config import load_config, load_settings
from treadle.dispatch.sqs import SqsDispatcher
from treadle.errors import ConfigError
from treadle.runtime import Runtime
from treadle_cloud.deadline import InvocationClock, with_deadline
from treadle_cloud.env import CloudSettings, aws_client, export_secrets
from treadle_cloud.s3volumes import S3VolumeStorage
from treadle_cloud.snapstart import SNAPSHOT_IMPORTS, prepare_snapshot

log = logging.getLogger("treadle.cloud")

T = TypeVar("T")

#: database connections per execution environment (one invocation at a time)
DEFAULT_POOL_SIZE = 2
#: check pooled connections before use when the environment was idle this long
CHECK_IDLE_AFTER_S = 60.0


def remaining_s(context: Any) -> float:
    """Seconds this invocation has left (infinite without a Lambda context)."""
    get = getattr(context, "get_remaining_time_in_millis", None)
    return get() / 1000.0 if callable(get) else math.inf


class Container:
    """`sync_triggers`: at open, bring treadle.yaml's schedules and webhooks into the database and
    the ScheduleDefs into EventBridge Scheduler — what the functions that serve or fire triggers
    do (api, webhook, scheduler, maintenance); the worker only runs steps and skips it (and the
    trigger modules' import)."""

    def __init__(
        self,
        *,
        sync_triggers: bool = True,
        clock: InvocationClock | None = None,
        snapshot_imports: Sequence[str] = (),
    ) -> None:
        self.sync_triggers = sync_triggers
        #: the worker's: model calls are bounded by its invocation's deadline (treadle_cloud.deadline)
        self.clock = clock
        self.loop = asyncio.new_event_loop()
        # under SnapStart: first-invocation imports into the snapshot (and the function's own
        # deferred ones, e.g. the API's routers: every one, as any request may come first)
        #: whether this is the INIT SnapStart snapshots (the function adds what it defers, e.g. routes)
        self.snapshot = prepare_snapshot(imports=(*SNAPSHOT_IMPORTS, *snapshot_imports))
        if self.snapshot:
            from treadle.runtime import build_deferred

            build_deferred()  # what treadle defers to first use (tool modules, rare models) goes in too
        self.cloud: CloudSettings | None = None
        self._runtime: Runtime | None = None
        self._last_used = 0.0

    def activate(self) -> asyncio.AbstractEventLoop:
        asyncio.set_event_loop(self.loop)
        return self.loop

    def run(self, aw: Coroutine[Any, Any, T]) -> T:
        return self.activate().run_until_complete(aw)

    def runtime(self) -> Runtime:
        """The Runtime, opened on the first call (secrets, migrations, pool). After the
        environment sat frozen a while, the pool's idle connections are checked first: RDS Proxy
        (and any firewall) closes connections that stay idle, and a frozen pool cannot notice."""
        if self._runtime is None:
            cloud = CloudSettings()
            exported = export_secrets(cloud)
            if exported:
                log.info("from Secrets Manager: %s", ", ".join(exported))
            self._runtime = self.run(open_cloud_runtime(cloud, sync_triggers=self.sync_triggers, clock=self.clock))
            self.cloud = cloud
        elif time.monotonic() - self._last_used > CHECK_IDLE_AFTER_S:
            self.run(self._runtime.pool.check())
        self._last_used = time.monotonic()
        return self._runtime

    def close(self) -> None:
        """Tests only: Lambda freezes an environment, it never closes it."""
        if self._runtime is not None:
            self.run(self._runtime.close())
            self._runtime = None
        self.loop.close()


class LazySqsClient:
    """`send_message` on a boto3 SQS client created on first use."""

    def send_message(self, **kwargs: Any) -> Any:
        return aws_client("sqs").send_message(**kwargs)


def cloud_volume_storage(cloud: CloudSettings) -> S3VolumeStorage | None:
    """Volumes as S3 prefixes (TREADLE_VOLUMES_BUCKET); None: the file tools refuse."""
    if not cloud.volumes_bucket:
        return None
    return S3VolumeStorage(lambda: aws_client("s3"), cloud.volumes_bucket, cloud.volumes_prefix)


async def open_cloud_runtime(
    cloud: CloudSettings, *, sync_triggers: bool = True, clock: InvocationClock | None = None
) -> Runtime:
    settings = load_settings()
    if not settings.database_url:
        raise ConfigError("the cloud shape needs DATABASE_URL or TREADLE_DB_SECRET_ARN (no embedded Postgres)")
    if not cloud.queue_url:
        raise ConfigError("TREADLE_QUEUE_URL is not set")
    # A worker may run a run's next steps in the same invocation (TREADLE_CHAIN_STEPS, default 8;
    # the worker sizes each chain from the invocation's remaining time), saving an SQS hop each.
    # A worker hears a cancel by checking its run every second while it waits on a model or a
    # tool: a LISTEN session would pin an RDS Proxy connection and outlive no invocation anyway.
    shape: dict[str, object] = {"cancel_watch": "poll"}
    if settings.db_pool_size == 0:
        shape["db_pool_size"] = DEFAULT_POOL_SIZE
    settings = settings.model_copy(update=shape)
    # validated in full at synth and by the deploy's migrate function: the sections this function
    # never reads (a worker's webhooks, say) are validated if and when it reads them
    config = load_config(settings.config, lazy=True)
    sqs = LazySqsClient()
    providers = None
    if clock is not None:
        from treadle.runtime import default_providers

        providers = with_deadline(default_providers(config), clock)
    rt = await Runtime.open(
        settings,
        config,
        providers=providers,
        dispatcher_factory=lambda _pool, _url: SqsDispatcher(sqs, cloud.queue_url),
        config_source=str(settings.config),
        volume_storage=cloud_volume_storage(cloud),
    )
    if sync_triggers:
        # yaml schedules/webhooks into the database; the API function (which has the EventBridge
        # Scheduler variables) keeps one AWS schedule per ScheduleDef
        from treadle.triggers.eventbridge import EventBridgeScheduler

        await rt.triggers.prepare(EventBridgeScheduler.from_env(lambda: aws_client("scheduler")))
    return rt
