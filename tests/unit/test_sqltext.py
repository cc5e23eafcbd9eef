"""store/sqltext.py: statements compacted for psycopg's conversion cache."""

from __future__ import annotations

import itertools
import re

import pytest
from psycopg import _queries

from treadle.builtins.memory import _FOLDED_INCR
from treadle.store.sqltext import compact
from treadle.store.steps import _commit_sql


def test_compact_drops_layout_and_comments_but_keeps_quoted_text() -> None:
    sql = ("\n        SELECT 'a  b -- not a comment', \"odd  \"\"name\"  -- a comment with a quote: it's\n"
           "          FROM t /* block\n          comment */ WHERE x = 'it''s  here'\n    ")
    assert compact(sql) == "SELECT 'a  b -- not a comment', \"odd  \"\"name\" FROM t WHERE x = 'it''s  here'"


@pytest.mark.parametrize("sql", ["SELECT $$ a  b $$", "SELECT E'a\\'  b'"])
def test_compact_refuses_what_it_cannot_read(sql: str) -> None:
    with pytest.raises(ValueError):
        compact(sql)


@pytest.mark.parametrize("fenced", [False, True])
@pytest.mark.parametrize("fold", [None, _FOLDED_INCR])
@pytest.mark.parametrize("final,parked,enqueue,chain", list(itertools.product([False, True], repeat=4)))
def test_every_shape_of_the_step_commit_fits_psycopgs_conversion_cache(
    fenced: bool, fold: str | None, final: bool, parked: bool, enqueue: bool, chain: bool
) -> None:
    """Past these limits psycopg re-parses the statement on every execute (the folded commit was
    4,420 characters before it was compacted). The widest: every column in its SET list."""
    sql = _commit_sql(fenced, fold, final=final, parked=parked, enqueue=enqueue, chain=chain,
                      sets_stop=True, sets_error=True, pokes_parent=True)
    assert len(sql.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH
    assert len(set(re.findall(r"%\((\w+)\)s", sql))) <= _queries.MAX_CACHED_STATEMENT_PARAMS
