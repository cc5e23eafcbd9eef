"""A loomcycle yaml read as treadle.yaml: the keys treadle honours are translated, every other
one is refused with one message naming it (never accepted and ignored).

Honoured: `defaults{provider, model}` (agents that name neither a model nor a tier get them),
`provider_priority` (the order tier candidates are tried in; a candidate whose provider is not
listed is skipped), `user_tiers{name: {provider_priority, tiers, fallback_on_error,
max_fallback_attempts}}` (config.py UserTierConfig; a run's `user_tier`, else `default`),
loomcycle's provider ids without a `providers:` entry (`anthropic`, `openai`, `gemini`,
`deepseek`, `ollama` = hosted ollama.com, `ollama-local` = a local Ollama, `mock`) and agent
names of the form `category/name`. `interruption.heartbeat_interval_ms` is accepted at loomcycle's
default (0 or 30000: a parked treadle run holds no process to heartbeat) and refused otherwise.
An empty section (`memory_backends: {}`, `hooks:` with no
`permit_host_widen` owners) says nothing treadle does not already do and is accepted. The
loomcycle keys of an agent that treadle honours are in AgentConfig (`sampling`,
`unbounded_iterations`); any other is refused by the schema as not supported.
"""

from __future__ import annotations

from typing import Any

#: loomcycle's provider ids as treadle provider declarations (providers.default.yaml)
BUILTIN_PROVIDERS: dict[str, dict[str, Any]] = {
    "anthropic": {"driver": "anthropic"},
    "openai": {"driver": "openai"},
    "gemini": {"driver": "gemini"},
    "deepseek": {"driver": "deepseek"},
    "ollama": {"driver": "ollama_cloud"},  # loomcycle: hosted ollama.com (OLLAMA_API_KEY)
    "ollama-local": {"driver": "ollama"},  # loomcycle: the local daemon
}

#: loomcycle top-level keys treadle has no equivalent for, with where treadle configures it
UNSUPPORTED_TOP: dict[str, str] = {
    "cache": "treadle has no response cache",
    "context_plugins": "treadle has no context plugins",
    "local_api": "treadle listens on TREADLE_LISTEN",
    "memory_backends": "treadle has one memory store",
    "change_subscriptions": "treadle has no change subscriptions",
    "document_sources": "treadle has no document sources",
    "hooks": "treadle registers tool hooks with POST /v1/hooks",
    "principals": "treadle authenticates with TREADLE_AUTH_TOKEN",
    "env_allowlist": "treadle reads no secrets from yaml",
}


#: loomcycle `storage:` keys and what treadle does instead (refused when set; see `_storage`)
STORAGE_REFUSED: dict[str, str] = {
    "pg_dsn": "set DATABASE_URL (treadle reads its database from the environment)",
    "pg_max_open_conns": "set TREADLE_DB_POOL_SIZE",
    "pg_min_idle_conns": "set TREADLE_DB_POOL_SIZE",
    "pg_max_idle_conns": "set TREADLE_DB_POOL_SIZE",
    "sqlmem_root": "treadle hosts SQL memory in Postgres schemas, not files (memory.sql.database_url)",
    "sqlmem_pg_dsn": "set memory.sql.database_url",
    "sqlmem_audit_mode": "treadle's SQL memory audit records the redacted statement",
    "sqlmem_txn_timeout_ms": "treadle's SQL memory transactions end with their step",
    "sqlmem_max_open_txns": "treadle's SQL memory transactions end with their step",
    "sqlmem_max_txn_depth": "treadle's SQL memory transactions end with their step",
}
#: loomcycle `storage.sqlmem_*` → treadle `memory.sql` fields
SQLMEM_FIELDS = {"sqlmem_statement_timeout_ms": "statement_timeout_ms", "sqlmem_max_rows": "max_rows",
                 "sqlmem_quota_bytes": "quota_bytes"}


def _storage(out: dict[str, Any], storage: Any, problems: list[tuple[str, str]]) -> None:
    """loomcycle's `storage:` onto treadle's database: `backend: sqlite` (its zero-setup store) and
    `postgres` are both treadle's PostgreSQL (DATABASE_URL, else the embedded one);
    `pg_automigrate: true` is what treadle does at start; `sqlmem_enabled` turns on `memory.sql`
    with its limits. Every other key is refused with what to set instead."""
    if not isinstance(storage, dict):
        problems.append(("storage", "must be a mapping"))
        return
    sql: dict[str, Any] | None = {} if storage.get("sqlmem_enabled") else None
    for key, value in storage.items():
        if key == "backend" and value in (None, "", "sqlite", "postgres"):
            continue
        if key == "pg_automigrate" and value in (None, True):
            continue
        if key == "sqlmem_enabled" and isinstance(value, bool):
            continue
        if value in (None, "", 0, False) and (key in STORAGE_REFUSED or key in SQLMEM_FIELDS):
            continue  # loomcycle's default: nothing said
        if key in SQLMEM_FIELDS and sql is not None:
            sql[SQLMEM_FIELDS[key]] = value
            continue
        where = STORAGE_REFUSED.get(key) or {
            "backend": "treadle stores in PostgreSQL",
            "pg_automigrate": "treadle migrates its schema at start",
            **{k: "it applies with sqlmem_enabled: true only" for k in SQLMEM_FIELDS},
        }.get(key, "treadle has no such storage setting")
        problems.append((f"storage.{key}", f"loomcycle key not supported by treadle ({where}); remove it"))
    if sql is not None:
        memory = dict(out.get("memory") or {})
        memory["sql"] = {**sql, **(memory.get("sql") or {})}
        out["memory"] = memory


#: mapping sections whose YAML null (`channels:` with nothing under it) means an empty one
NULLABLE_SECTIONS = ("agents", "channels", "models", "tiers", "providers", "user_tiers", "mcp_servers", "volumes",
                     "scheduled_runs", "webhooks", "skills", "teams")


def is_empty(key: str, value: Any) -> bool:
    """Nothing said: None, {}, []; `hooks` whose permit_host_widen owners are empty is
    loomcycle's default (no hook may widen hosts), which is treadle's behaviour."""
    if value is None or value == {} or value == []:
        return True
    if key == "hooks" and isinstance(value, dict) and set(value) <= {"permit_host_widen"}:
        widen = value.get("permit_host_widen") or {}
        return isinstance(widen, dict) and set(widen) <= {"owners"} and not widen.get("owners")
    return False


def referenced_providers(data: dict[str, Any]) -> set[str]:
    refs: set[str] = set()

    def cand(c: Any) -> None:
        if isinstance(c, dict) and isinstance(c.get("provider"), str):
            refs.add(c["provider"])

    for ref in (data.get("models") or {}).values():
        cand(ref)
    for spec in (data.get("tiers") or {}).values():
        for c in spec if isinstance(spec, list) else (spec or {}).get("candidates") or []:
            cand(c)
    for ut in (data.get("user_tiers") or {}).values():
        if isinstance(ut, dict):
            refs.update(p for p in ut.get("provider_priority") or [] if isinstance(p, str))
            for cands in (ut.get("tiers") or {}).values():
                for c in cands or []:
                    cand(c)
    for agent in (data.get("agents") or {}).values():
        cand(agent)
    cand(data.get("defaults"))
    refs.update(p for p in data.get("provider_priority") or [] if isinstance(p, str))
    return refs


def adapt(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(treadle.yaml mapping, problems): loomcycle's keys translated or refused (module doc)."""
    # a section left empty (`channels:` with only comments under it) is YAML's null: nothing declared
    out = {k: v for k, v in data.items() if not (v is None and k in NULLABLE_SECTIONS)}
    problems: list[tuple[str, str]] = []
    for key, where in UNSUPPORTED_TOP.items():
        if key in out:
            value = out.pop(key)
            if not is_empty(key, value):
                problems.append((key, f"loomcycle key not supported by treadle ({where}); remove it"))
    if "storage" in out:
        _storage(out, out.pop("storage"), problems)
    if "memory" in out and isinstance(out["memory"], dict) and "consolidation" in out["memory"]:
        memory = dict(out["memory"])
        if not is_empty("consolidation", memory.pop("consolidation")):
            problems.append(("memory.consolidation", "loomcycle key not supported by treadle (no memory "
                                                     "consolidation); remove it"))
        out["memory"] = memory
    if isinstance(out.get("interruption"), dict):
        interruption = dict(out["interruption"])
        backend = interruption.pop("backend", None)
        if backend not in (None, "webui"):
            problems.append(("interruption.backend", f"treadle answers interruptions over its API (loomcycle's "
                                                     f"'webui' backend), not {backend!r}"))
        beat = interruption.pop("heartbeat_interval_ms", None)
        if beat not in (None, 0, 30_000):  # 0 and 30000 are loomcycle's default: nothing said
            problems.append(("interruption.heartbeat_interval_ms",
                             "loomcycle key not supported by treadle (a parked run holds no process, so there is "
                             "no during-block heartbeat to tune; the sweeper finds a lost wake within "
                             "TREADLE_SWEEP_INTERVAL_SECONDS); remove it or leave loomcycle's default 30000"))
        out["interruption"] = interruption
    defaults = out.pop("defaults", None)
    if isinstance(defaults, dict) and defaults:
        agents = {}
        for name, agent in (out.get("agents") or {}).items():
            if isinstance(agent, dict) and not ({"provider", "model", "tier"} & set(agent)):
                agent = {**{k: v for k, v in defaults.items() if k in ("provider", "model")}, **agent}
            agents[name] = agent
        if agents:
            out["agents"] = agents
    declared = out.get("providers") or {}
    if isinstance(declared, dict) and isinstance(declared.get("code-js"), dict) and set(declared["code-js"]) <= {
            "driver"} and declared["code-js"].get("driver") == "code-js":
        # loomcycle's providers.default.yaml declares its synthetic code-js provider: treadle's is
        # built in under the same id (switched on by code_agents.enabled, as loomcycle's by its env)
        declared = {k: v for k, v in declared.items() if k != "code-js"}
        out["providers"] = declared
    if isinstance(declared, dict):
        missing = {p: dict(BUILTIN_PROVIDERS[p]) for p in referenced_providers(out)
                   if p in BUILTIN_PROVIDERS and p not in declared}
        if missing:
            out["providers"] = {**declared, **missing}
    return out, problems
