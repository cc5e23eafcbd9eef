"""Ephemeral volumes on both adapters: an instance lives under its top-level run, is shared by
nothing else, survives until the run ends, and is purged then — by the engine at the run's end,
or by the sweeper's pass (`purge_ended`) when that was missed; and the cloud shape's wiring picks
the S3 adapter from TREADLE_VOLUMES_BUCKET."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.workspace import AGENTS, CONFIG, Caller, new_id
from treadle.errors import ToolError
from treadle.store.runs import NewRun
from treadle.volumes.base import VolumeStorage
from treadle.volumes.paths import ephemeral_location


async def test_ephemeral_instance_lives_with_its_run(open_runtime: Any, storage: VolumeStorage) -> None:
    rt, dispatcher = await open_runtime(AGENTS, config=CONFIG)
    rt.volumes.storage = storage
    tenant = new_id("t")
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="coder",
                                       segments=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]))
    call = Caller(rt, tenant=tenant, run_id=run.id)
    await call("Write", {"path": "tmp/a.txt", "content": "ephemeral", "volume": "scratch"})
    other = Caller(rt, tenant=tenant, run_id=(await rt.start_run(NewRun(
        tenant_id=tenant, agent="coder", segments=[{"role": "user", "content": [{"type": "text", "text": "x"}]}],
    )))[0].id)
    with pytest.raises(ToolError, match="not found"):  # another top-level run has its own instance
        await other("Read", {"path": "tmp/a.txt", "volume": "scratch"})
    location = ephemeral_location(tenant, run.id, "scratch")
    await rt.volumes.purge_ended()  # the run goes on: its instance is not the sweeper's
    assert [e.path for e in (await storage.walk(location, "", 10)).entries] == ["tmp/a.txt"]

    rt.engine.on_run_end = None  # as if the process died right after the run's last commit
    await dispatcher.drain()
    assert (await storage.walk(location, "", 10)).entries  # still there: nobody purged it
    assert await rt.volumes.purge_ended() >= 1  # the sweeper's pass
    assert (await storage.walk(location, "", 10)).entries == []
    assert await rt.volumes.store.instances(run.id) == []


def test_the_cloud_shape_keeps_volumes_in_s3(s3_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from treadle_cloud.container import cloud_volume_storage
    from treadle_cloud.env import CloudSettings, aws_client
    from treadle_cloud.s3volumes import S3VolumeStorage

    assert cloud_volume_storage(CloudSettings()) is None  # no bucket: volumes unavailable
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": s3_client.meta.endpoint_url}.items():
        monkeypatch.setenv(k, v)
    aws_client.cache_clear()
    try:
        storage = cloud_volume_storage(CloudSettings(volumes_bucket="cloud-vols", volumes_prefix="p"))
        assert isinstance(storage, S3VolumeStorage) and (storage.bucket, storage.prefix) == ("cloud-vols", "p")
        assert not storage.supports_exec
        s3_client.create_bucket(Bucket="cloud-vols")
        asyncio.run(storage.write("t/x/v/w", "a.txt", b"lazily"))  # the client is made on first use
        assert s3_client.get_object(Bucket="cloud-vols", Key="p/t/x/v/w/a.txt")["Body"].read() == b"lazily"
    finally:
        aws_client.cache_clear()
