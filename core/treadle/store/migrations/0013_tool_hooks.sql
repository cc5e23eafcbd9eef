-- Tool-use hooks (loomcycle's POST /v1/hooks): an HTTP callback before (pre) or after (post) the
-- calls of matching agents' matching tools; see core/treadle/hooks/.
CREATE TABLE tool_hooks (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL,
    owner         text NOT NULL,
    name          text NOT NULL,
    phase         text NOT NULL CHECK (phase IN ('pre', 'post')),
    agents        jsonb NOT NULL DEFAULT '[]',
    tools         jsonb NOT NULL DEFAULT '[]',
    callback_url  text NOT NULL,
    fail_mode     text NOT NULL CHECK (fail_mode IN ('open', 'closed')),
    timeout_ms    integer NOT NULL,
    secret_env    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, owner, name, phase)
);
