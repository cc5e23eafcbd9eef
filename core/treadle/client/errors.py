"""The client's errors: the server's `{code, error, details}` as ApiError (its `code` is the
stable code of treadle.errors), and a connection that stayed lost after every retry."""

from __future__ import annotations

from typing import Any

from treadle.errors import TreadleError


class ApiError(TreadleError):
    """A 4xx/5xx answer: `status`, `code` (stable, e.g. `run_not_found`), `message`, `details`."""

    def __init__(self, status: int, code: str, message: str, *, details: Any = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.details = details
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"
