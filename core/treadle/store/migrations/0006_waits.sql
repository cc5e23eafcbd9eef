-- Parked runs (invariant 3: waiting costs nothing). A run that waits has status 'waiting' and
-- one row per (tool_use, key) it waits on; poking a key wakes every run waiting on it.
CREATE TABLE run_waits (
    run_id       text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id    text NOT NULL,
    tool_use_id  text NOT NULL,
    kind         text NOT NULL,
    key          text NOT NULL,
    deadline     timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_use_id, key)
);
CREATE INDEX run_waits_key_ix ON run_waits (tenant_id, key);
CREATE INDEX run_waits_deadline_ix ON run_waits (deadline) WHERE deadline IS NOT NULL;

-- A version per wait key, bumped by every poke: a tool reads it before checking its condition
-- and parks "since" that version; a poke that lands in between is detected at the park commit.
CREATE TABLE wait_keys (
    tenant_id  text NOT NULL,
    key        text NOT NULL,
    version    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, key)
);

ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_wait_key text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS depth integer NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS runs_parent_ix ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_waiting_ix ON runs (tenant_id, updated_at DESC) WHERE status = 'waiting';
