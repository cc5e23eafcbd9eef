"""Log records that say which run they belong to, and the two output formats.

The engine sets the run's fields (`log_fields`) around each step; a filter on the handler copies
them, and the current span's trace/span ids, onto every record. `TREADLE_LOG_FORMAT=json` writes
one JSON object per line; the default is readable text.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

from opentelemetry import trace

from treadle.errors import ConfigError

_fields: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("treadle_log_fields", default=None)

#: the record attributes the filter sets (JSON keys, in order)
FIELDS = ("run_id", "step_no", "tenant", "trace_id", "span_id")


@contextmanager
def log_fields(**fields: Any) -> Iterator[None]:
    """Records logged inside the block carry `fields` (run_id, step_no, tenant)."""
    token = _fields.set({**(_fields.get() or {}), **fields})
    try:
        yield
    finally:
        _fields.reset(token)


class RunContextFilter(logging.Filter):
    """Copies the run's fields and the current span's ids onto a record (None when absent)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _fields.get() or {}
        for name in ("run_id", "step_no", "tenant"):
            setattr(record, name, fields.get(name))
        ctx = trace.get_current_span().get_span_context()
        record.trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else None
        record.span_id = format(ctx.span_id, "016x") if ctx.is_valid else None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """`LEVEL logger: message`, with `[run_id#step]` when the record belongs to a run."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        run_id = getattr(record, "run_id", None)
        if run_id is None:
            return line
        return f"{line} [{run_id}#{getattr(record, 'step_no', '?')}]"


def log_format() -> str:
    fmt = (os.environ.get("TREADLE_LOG_FORMAT") or "text").strip().lower()
    if fmt not in ("text", "json"):
        raise ConfigError(f"TREADLE_LOG_FORMAT must be 'text' or 'json', not {fmt!r}")
    return fmt


def make_handler(fmt: str | None = None, stream: TextIO | None = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RunContextFilter())
    fmt = fmt or log_format()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter("%(levelname)s %(name)s: %(message)s"))
    return handler


#: TREADLE_LOG_LEVEL's names
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def treadle_log_level() -> int:
    """$TREADLE_LOG_LEVEL for treadle's own loggers (default info: a line per run start and end,
    per failed step, per request of the sidecar; other libraries stay at WARNING)."""
    name = (os.environ.get("TREADLE_LOG_LEVEL") or "info").strip().lower()
    if name not in LEVELS:
        raise ConfigError(f"TREADLE_LOG_LEVEL must be one of {', '.join(LEVELS)}, not {name!r}")
    return LEVELS[name]


def configure_logging(level: int = logging.WARNING, fmt: str | None = None) -> None:
    """The root logger's handler, in `fmt` (default: $TREADLE_LOG_FORMAT, else text), at `level`;
    the `treadle` loggers at $TREADLE_LOG_LEVEL. The `treadle.audit` logger (one INFO line per
    model call without a run: docs/openai.md) logs at INFO whatever the levels, so the audit lines
    the docs promise do appear."""
    logging.basicConfig(level=level, handlers=[make_handler(fmt)], force=True)
    logging.getLogger("treadle").setLevel(treadle_log_level())
    audit = logging.getLogger("treadle.audit")
    if audit.level == logging.NOTSET or audit.level > logging.INFO:
        audit.setLevel(logging.INFO)
