"""Fixtures for the waiting tests (pause, snapshots and their crash tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.db import clone_database, drop_database


@pytest.fixture
def target_db(server_url: str, migrated_template: str) -> Iterator[str]:
    """A second migrated database of the test's own (where a snapshot is restored), dropped afterwards."""
    url = clone_database(server_url, migrated_template, "snaptarget")
    yield url
    drop_database(server_url, url)
