"""One served treadle for the contract tests, in a thread of its own (schemathesis calls it from
this thread with blocking HTTP): tests/support/contract.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.contract import ServedInThread, serve_in_thread


@pytest.fixture(scope="module")
def served_api(db_url: str) -> Iterator[ServedInThread]:
    with serve_in_thread(db_url) as served:
        yield served
