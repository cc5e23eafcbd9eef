-- A user's inbox of questions (GET /v1/users/{user_id}/interrupts): interruptions join their run
-- for its user; pending ones are what an inbox shows first.
CREATE INDEX interrupts_pending_ix ON interrupts (tenant_id, created_at) WHERE status = 'pending';
CREATE INDEX runs_tenant_user_ix ON runs (tenant_id, user_id, created_at DESC) WHERE user_id IS NOT NULL;
