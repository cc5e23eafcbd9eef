"""Moving state between treadles: snapshots (issue 36)."""
