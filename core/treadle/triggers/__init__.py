"""Triggers: schedules (sweeper, EventBridge) and webhooks (signatures, mapping, idempotency)."""
