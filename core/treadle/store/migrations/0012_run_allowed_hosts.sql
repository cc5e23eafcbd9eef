-- The caller's narrowing of which hosts a run's tools may reach (POST /v1/runs `allowed_hosts`);
-- NULL: no narrowing. Sub-agent runs inherit their parent's.
ALTER TABLE runs ADD COLUMN allowed_hosts jsonb;
