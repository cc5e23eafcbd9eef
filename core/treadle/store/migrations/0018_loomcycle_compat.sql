-- loomcycle compatibility (issue 18).
-- 1. AgentDef / SkillDef content_sha256 becomes loomcycle's hash; treadle's earlier hash stays
--    readable as treadle_sha256. Rows written before keep their hash in both columns until the
--    runtime recomputes content_sha256 at start (DefLifecycle.rehash_legacy).
ALTER TABLE defs ADD COLUMN IF NOT EXISTS treadle_sha256 text;
UPDATE defs SET treadle_sha256 = content_sha256 WHERE kind IN ('agent', 'skill') AND treadle_sha256 IS NULL;
