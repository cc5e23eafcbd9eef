-- Stored responses go with what they tell (issue 38): an agent's response is a turn of its run, so
-- it is deleted with the run — retention of finished runs, a subject's erasure, a tenant's deletion
-- (ON DELETE CASCADE; responses whose run is already gone go first). Retention class `responses`
-- (`retention.responses_days`) deletes stored responses by age: the created_at index.
DELETE FROM openai_responses r
 WHERE r.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = r.run_id);
ALTER TABLE openai_responses
    ADD CONSTRAINT openai_responses_run_fk FOREIGN KEY (run_id) REFERENCES runs (id) ON DELETE CASCADE;
CREATE INDEX IF NOT EXISTS openai_responses_run_ix ON openai_responses (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS openai_responses_created_ix ON openai_responses (created_at);
