"""Pure specs and validators: operator config pieces, def bodies, cron, webhook mappings (no I/O)."""
