-- Sessions (issue 34): a session holds many runs of one agent and user. A run that continues a
-- session reads the earlier runs' events in place (engine/replay.py `history`); nothing is copied.
-- A top-level run started without a session opens one named after it (`s_` + the run's hex); a
-- sub-agent run has no session row (its session id is still derived from its run id).
CREATE TABLE IF NOT EXISTS sessions (
    id                  text PRIMARY KEY,
    tenant_id           text NOT NULL,
    agent               text NOT NULL,
    user_id             text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    title               text,
    description         text,
    tags                text[] NOT NULL DEFAULT '{}',
    pinned              boolean NOT NULL DEFAULT false,
    archived_at         timestamptz,
    summary             text,
    summary_updated_at  timestamptz,
    -- how many runs the session holds; a continuation takes the next ordinal (runs.session_seq)
    run_count           integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_tenant_user_ix ON sessions (tenant_id, user_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS sessions_tenant_updated_ix ON sessions (tenant_id, updated_at DESC);
SELECT treadle_isolate_tenant('sessions');

ALTER TABLE runs ADD COLUMN IF NOT EXISTS session_id text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS session_seq integer;
-- a session's runs in order (a continuation's history); the index never changes after a run's
-- start, so it costs the steps' heap-only updates nothing
CREATE INDEX IF NOT EXISTS runs_session_ix ON runs (session_id, session_seq) WHERE session_id IS NOT NULL;
-- one live run per session (409 session_busy); a finished run frees the session
CREATE UNIQUE INDEX IF NOT EXISTS runs_live_session ON runs (tenant_id, session_id)
    WHERE session_id IS NOT NULL AND status IN ('queued', 'running', 'waiting');

-- the runs before this migration: each top-level run is its own session
INSERT INTO sessions (id, tenant_id, agent, user_id, created_at, updated_at, run_count)
SELECT 's_' || substr(id, 3), tenant_id, agent, user_id, created_at, updated_at, 1
FROM runs WHERE parent_run_id IS NULL AND session_id IS NULL AND id LIKE 'r\_%'
ON CONFLICT (id) DO NOTHING;
UPDATE runs SET session_id = 's_' || substr(id, 3), session_seq = 0
WHERE parent_run_id IS NULL AND session_id IS NULL AND id LIKE 'r\_%';
