-- Per-run credentials (POST /v1/runs `user_credentials`), sealed: AES-256-GCM under a key the
-- database never holds (TREADLE_CREDENTIALS_KEY, or a key of the process's own); the tenant is
-- authenticated data. Only MCP transports open them (treadle/mcp/credentials.py). A sub-agent run
-- reads its root run's row. The row goes with its run.
CREATE TABLE run_credentials (
    run_id     text PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id  text NOT NULL,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
