-- Triggers: scheduled runs and signed webhooks. Their definitions are defs (kind 'schedule' /
-- 'webhook'); these tables hold what happens to them.

-- One row per schedule name: which version is active and its firing state.
CREATE TABLE schedules (
    schedule_id     text PRIMARY KEY,
    tenant_id       text NOT NULL,
    name            text NOT NULL,
    def_id          text NOT NULL REFERENCES defs (def_id),
    version         integer NOT NULL,
    status          text NOT NULL DEFAULT 'active',
    paused          boolean NOT NULL DEFAULT false,
    -- the earliest fire time not handled yet; NULL = nothing to fire (disabled, paused, retired)
    next_fire_at    timestamptz,
    fire_count      integer NOT NULL DEFAULT 0,   -- fires of the active version (max_fires counts these)
    total_fires     bigint NOT NULL DEFAULT 0,
    skipped_fires   bigint NOT NULL DEFAULT 0,
    last_fire_at    timestamptz,
    retired_reason  text,
    -- what an external scheduler (EventBridge) holds: 'v<version>:enabled|disabled'; NULL = nothing
    synced_state    text,
    sync_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_status_ck CHECK (status IN ('active', 'retired')),
    CONSTRAINT schedules_name_uq UNIQUE (tenant_id, name)
);
CREATE INDEX schedules_due_ix ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;

-- A fire is recorded once: two sweepers, a redelivered EventBridge invocation or a restart can
-- never fire (schedule_id, scheduled_for) twice.
CREATE TABLE schedule_fires (
    schedule_id       text NOT NULL REFERENCES schedules (schedule_id) ON DELETE CASCADE,
    scheduled_for     timestamptz NOT NULL,
    tenant_id         text NOT NULL,
    def_id            text NOT NULL,
    version           integer NOT NULL,
    source            text NOT NULL,
    status            text NOT NULL DEFAULT 'claimed',
    run_id            text,
    error             text,
    hooks_status      text NOT NULL DEFAULT 'none',
    hooks_result      jsonb,
    hooks_claimed_at  timestamptz,
    fired_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, scheduled_for),
    CONSTRAINT schedule_fires_status_ck CHECK (status IN ('claimed', 'started', 'skipped', 'failed')),
    CONSTRAINT schedule_fires_hooks_ck CHECK (hooks_status IN ('none', 'pending', 'running', 'done', 'failed', 'skipped'))
);
CREATE INDEX schedule_fires_claimed_ix ON schedule_fires (fired_at) WHERE status = 'claimed';
CREATE INDEX schedule_fires_hooks_ix ON schedule_fires (run_id) WHERE hooks_status IN ('pending', 'running');

-- Webhook deliveries: accepted ones are unique per (tenant, webhook, delivery id); rejected ones
-- are kept for triage (recent-deliveries), pruned per webhook.
CREATE TABLE webhook_deliveries (
    id                bigserial PRIMARY KEY,
    tenant_id         text NOT NULL,
    webhook           text NOT NULL,
    delivery_id       text,
    def_id            text,
    version           integer,
    verdict           text NOT NULL,
    state             text NOT NULL DEFAULT 'done',
    delivery          text,
    run_id            text,
    result            jsonb,
    error             text,
    hooks_status      text NOT NULL DEFAULT 'none',
    hooks_result      jsonb,
    hooks_claimed_at  timestamptz,
    received_at       timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_state_ck CHECK (state IN ('claimed', 'done')),
    CONSTRAINT webhook_deliveries_hooks_ck CHECK (hooks_status IN ('none', 'pending', 'running', 'done', 'failed', 'skipped'))
);
CREATE UNIQUE INDEX webhook_deliveries_once_uq ON webhook_deliveries (tenant_id, webhook, delivery_id)
    WHERE verdict = 'accepted';
CREATE INDEX webhook_deliveries_recent_ix ON webhook_deliveries (tenant_id, webhook, id DESC);
CREATE INDEX webhook_deliveries_hooks_ix ON webhook_deliveries (run_id) WHERE hooks_status IN ('pending', 'running');

-- Per-webhook token buckets (shared by every process and Lambda).
CREATE TABLE webhook_rate (
    tenant_id   text NOT NULL,
    webhook     text NOT NULL,
    tokens      double precision NOT NULL,
    granted     boolean NOT NULL DEFAULT true,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, webhook)
);
