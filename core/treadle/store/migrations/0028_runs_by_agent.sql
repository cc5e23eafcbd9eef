-- Listing a tenant's runs of one agent (`GET /v1/runs?agent=…`, the console) read every run of the
-- tenant and filtered (1.6 ms at 1 k runs, 10.5 ms at 50 k, issue 32). `agent` never changes
-- after a run's start, so the index costs the steps' heap-only updates nothing.
CREATE INDEX IF NOT EXISTS runs_tenant_agent_ix ON runs (tenant_id, agent, created_at DESC);
