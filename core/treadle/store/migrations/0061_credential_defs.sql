-- Tenant credentials (issue 42 item 3): loomcycle's CredentialDef (its 0051) — named secrets per
-- tenant, user or agent, sealed (AES-256-GCM under a per-tenant key derived by HKDF from the
-- deployment key, the row's tenant/scope/scope_id/name as authenticated data: a row copied to
-- another tenant or name does not open). `key_id` names the deployment key that sealed it (the
-- current one or TREADLE_CREDENTIALS_KEY_PREVIOUS during a rotation). Never a plaintext value;
-- never exported (store/tenants.py), erased with its tenant.
CREATE TABLE IF NOT EXISTS credential_defs (
    tenant_id   text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('tenant', 'user', 'agent')),
    scope_id    text NOT NULL DEFAULT '',
    name        text NOT NULL,
    sealed      bytea NOT NULL,
    key_id      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, scope, scope_id, name)
);
SELECT treadle_isolate_tenant('credential_defs'::regclass);
