-- loomcycle compatibility (issue 18).
-- 1. AgentDef / SkillDef content_sha256 becomes loomcycle's hash; treadle's earlier hash stays
--    readable as treadle_sha256. Rows written before keep their hash in both columns until the
--    runtime recomputes content_sha256 at start (DefLifecycle.rehash_legacy).
ALTER TABLE defs ADD COLUMN IF NOT EXISTS treadle_sha256 text;
UPDATE defs SET treadle_sha256 = content_sha256 WHERE kind IN ('agent', 'skill') AND treadle_sha256 IS NULL;

-- 2. loomcycle's run fields: the caller's agent_id handle (GET /v1/agents/{id}, POST
--    /v1/agents/{id}/cancel), parent_context (echoed, inherited by sub-agents) and the per-run
--    options treadle honours (tool narrowing, sampling, user_tier, run_timeout_seconds).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS agent_id text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS parent_context jsonb;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS run_options jsonb;
CREATE INDEX IF NOT EXISTS runs_agent_id ON runs (tenant_id, agent_id, created_at DESC) WHERE agent_id IS NOT NULL;
-- one live run per agent_id (loomcycle: 409 agent_id_in_use); a finished run frees its handle
CREATE UNIQUE INDEX IF NOT EXISTS runs_live_agent_id ON runs (tenant_id, agent_id)
    WHERE agent_id IS NOT NULL AND status IN ('queued', 'running', 'waiting');
