"""Leaving a pipeline whose statement failed may raise PipelineAborted (for the skipped COMMIT)
with the statement's error as its context; the step commit matches on the statement's error
(its fence divides by zero), so `statement_error` digs it out — else a cancel that lands while a
chained step commits is taken for a crash (found under load: the run went to RETRY_LATER)."""

from __future__ import annotations

import psycopg
from psycopg import errors

from treadle.store.db import statement_error


def raised(exc: BaseException, context: BaseException | None) -> BaseException:
    try:
        try:
            if context is not None:
                raise context
        finally:
            raise exc
    except BaseException as got:
        return got


def test_the_statements_error_is_found_behind_pipeline_aborted() -> None:
    fence = errors.DivisionByZero("division by zero")
    aborted = raised(errors.PipelineAborted("pipeline aborted"), fence)
    assert isinstance(aborted, psycopg.Error) and aborted.__context__ is fence
    assert statement_error(aborted) is fence


def test_an_error_of_its_own_is_kept() -> None:
    plain = errors.DivisionByZero("division by zero")
    assert statement_error(plain) is plain
    lone = raised(errors.PipelineAborted("pipeline aborted"), None)
    assert isinstance(lone, psycopg.Error) and statement_error(lone) is lone
    unrelated = raised(errors.PipelineAborted("pipeline aborted"), ValueError("not the database's"))
    assert isinstance(unrelated, psycopg.Error) and statement_error(unrelated) is unrelated
