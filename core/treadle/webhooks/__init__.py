"""Signed inbound webhooks: WebhookDef, signature verification, payload mapping, idempotency."""
