-- Per-run credentials (POST /v1/runs `user_credentials`), sealed: AES-256-GCM under a key the
-- database never holds (TREADLE_CREDENTIALS_KEY, or a key of the process's own); the tenant is
-- authenticated data. Only MCP transports open them (treadle/mcp/credentials.py). A sub-agent run
-- reads its root run's row. The row goes when the run ends (below) or is deleted.
CREATE TABLE run_credentials (
    run_id     text PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    tenant_id  text NOT NULL,
    sealed     bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Credentials are for the run: the statement that ends it (completed, failed, cancelled) deletes
-- them, in the same transaction. A parked or interactive run keeps them until it ends.
CREATE FUNCTION run_credentials_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_credentials WHERE run_id = NEW.id;
    RETURN NULL;
END $$;

CREATE TRIGGER run_credentials_forget AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION run_credentials_forget();
