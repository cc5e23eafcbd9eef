"""Fixtures for the workspace tests: each test runs against both Volume adapters — a host
directory (tmp_path) and an S3 bucket on moto's server (loopback, dummy credentials)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.support.workspace import AGENTS, CONFIG
from treadle.runtime import Runtime
from treadle.volumes.base import VolumeStorage
from treadle.volumes.host import HostDirStorage


@pytest.fixture(scope="session")
def s3_client(moto_url: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(params=["host", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> VolumeStorage:
    if request.param == "host":
        return HostDirStorage(tmp_path / "volumes")
    from treadle_cloud.s3volumes import S3VolumeStorage

    client = request.getfixturevalue("s3_client")
    bucket = f"vols-{secrets.token_hex(6)}"
    client.create_bucket(Bucket=bucket)
    return S3VolumeStorage(client, bucket, "treadle/volumes")


@pytest.fixture
async def ws(open_runtime: Any, storage: VolumeStorage, tmp_path: Path) -> Runtime:
    """A runtime with the workspace agents whose volumes live in `storage`."""
    rt, _dispatcher = await open_runtime(AGENTS, config=CONFIG)
    rt.volumes.storage = storage  # the adapter under test, as a shape's composition root plugs it in
    result: Runtime = rt
    return result
