-- Operator bearer tokens (OperatorTokenDef): the versions live in `defs` (kind operator_token,
-- body without the token); this table is what authentication reads — one row per token hash,
-- valid while expires_at is NULL or in the future (retire: now; rotate: now + grace).
CREATE TABLE auth_tokens (
    token_hash  text PRIMARY KEY,
    def_id      text NOT NULL,
    tenant_id   text NOT NULL,
    name        text NOT NULL,
    subject     text NOT NULL,
    scopes      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz
);
CREATE INDEX auth_tokens_def ON auth_tokens (def_id);
CREATE INDEX auth_tokens_tenant ON auth_tokens (tenant_id, name);
