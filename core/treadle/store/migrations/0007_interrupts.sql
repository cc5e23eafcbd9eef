-- Waiting without compute: interruptions (a run asks a human and parks), the steering queue
-- (input / turn cancel for a run, drained by the run's own step under its lease), and the
-- counter that tells a step, for free, that something is queued for it.

CREATE TABLE interrupts (
    id            text PRIMARY KEY,               -- derived from (run_id, tool_use_id)
    tenant_id     text NOT NULL,
    run_id        text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tool_use_id   text NOT NULL,
    kind          text NOT NULL DEFAULT 'question',
    question      text NOT NULL,
    options       jsonb NOT NULL DEFAULT '[]'::jsonb,
    context       text,
    priority      text NOT NULL DEFAULT 'normal',
    status        text NOT NULL DEFAULT 'pending',
    answer        text,
    resolved_by   text,
    expires_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    resolved_at   timestamptz,
    CONSTRAINT interrupts_status_ck CHECK (status IN ('pending','resolved','declined','timed_out','cancelled')),
    CONSTRAINT interrupts_priority_ck CHECK (priority IN ('low','normal','high')),
    UNIQUE (run_id, tool_use_id)
);
CREATE INDEX interrupts_run_ix ON interrupts (tenant_id, run_id, created_at);

-- Steering queue. A row is consumed when the run's transcript records its id (a `user_input`
-- or `turn_cancelled` event carrying `input_id`); `consumed_at` is only bookkeeping.
CREATE TABLE run_inputs (
    id           bigserial PRIMARY KEY,
    tenant_id    text NOT NULL,
    run_id       text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind         text NOT NULL,
    text         text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    consumed_at  timestamptz,
    CONSTRAINT run_inputs_kind_ck CHECK (kind IN ('input','turn_cancel'))
);
CREATE INDEX run_inputs_run_ix ON run_inputs (run_id, id);

-- The id of the newest run_inputs row of the run (0: none). The lease returns it, so a step
-- knows without a query whether anything was queued since its transcript last consumed input.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS input_seq bigint NOT NULL DEFAULT 0;
