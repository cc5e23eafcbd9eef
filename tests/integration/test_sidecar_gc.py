"""The sidecar moves what its start-up made out of the cyclic collector's sight while it serves
(sidecar/treadle_sidecar/app.py, as functions/__init__.py does for a Lambda): a full collection
then walks only what came after, and garbage made while serving is still collected."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


async def test_the_start_up_heap_is_frozen_while_serving_and_later_garbage_is_collected(
        migrated_db_url: str) -> None:
    settings = Settings(database_url=migrated_db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=1,
                        sweep_interval_seconds=30.0)
    before = gc.get_freeze_count()
    server = BackgroundServer(settings, parse_config({"agents": {"echo": {"model": "echo"}}}))
    await server.start()
    try:
        frozen = gc.get_freeze_count()
        garbage = Node()
        gone = weakref.ref(garbage)
        del garbage
        gc.collect()
        collected = gone() is None
    finally:
        await server.stop()
    assert frozen > before
    assert collected
    assert gc.get_freeze_count() == 0  # stopped: nothing of it stays frozen
