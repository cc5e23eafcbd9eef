-- The durable core: runs, their transcripts, the sidecar job queue, and Memory.
CREATE TABLE runs (
    id                     text PRIMARY KEY,
    tenant_id              text NOT NULL,
    user_id                text,
    agent                  text NOT NULL,
    def_id                 text,
    parent_run_id          text,
    root_run_id            text,
    status                 text NOT NULL,
    stop_reason            text,
    error                  jsonb,
    step_no                integer NOT NULL DEFAULT 0,
    last_seq               integer NOT NULL DEFAULT 0,
    iterations             integer NOT NULL DEFAULT 0,
    step_failures          integer NOT NULL DEFAULT 0,
    lease_owner            text,
    lease_until            timestamptz,
    cancel_requested       boolean NOT NULL DEFAULT false,
    cancel_reason          text,
    interactive            boolean NOT NULL DEFAULT false,
    idempotency_key        text,
    metadata               jsonb NOT NULL DEFAULT '{}'::jsonb,
    input_tokens           bigint NOT NULL DEFAULT 0,
    output_tokens          bigint NOT NULL DEFAULT 0,
    cache_creation_tokens  bigint NOT NULL DEFAULT 0,
    cache_read_tokens      bigint NOT NULL DEFAULT 0,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    completed_at           timestamptz,
    CONSTRAINT runs_status_ck CHECK (status IN ('queued','running','waiting','completed','failed','cancelled'))
);
CREATE UNIQUE INDEX runs_idempotency_uq ON runs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_tenant_created_ix ON runs (tenant_id, created_at DESC);
CREATE INDEX runs_active_lease_ix ON runs (lease_until) WHERE status IN ('queued','running');

CREATE TABLE events (
    run_id       text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq          integer NOT NULL,
    tenant_id    text NOT NULL,
    type         text NOT NULL,
    payload      jsonb NOT NULL,
    tool_use_id  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);
-- Invariant 1: a tool_use is answered exactly once.
CREATE UNIQUE INDEX events_one_result_per_tool_use_uq ON events (run_id, tool_use_id) WHERE type = 'tool_result';

CREATE TABLE jobs (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    run_id      text NOT NULL,
    step_no     integer NOT NULL,
    run_at      timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_due_ix ON jobs (run_at, id);

CREATE TABLE memory (
    tenant_id   text NOT NULL,
    scope       text NOT NULL,
    scope_id    text NOT NULL,
    key         text NOT NULL,
    value       jsonb NOT NULL,
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, scope, scope_id, key),
    CONSTRAINT memory_scope_ck CHECK (scope IN ('agent','user','tenant'))
);
CREATE INDEX memory_expires_ix ON memory (expires_at) WHERE expires_at IS NOT NULL;
