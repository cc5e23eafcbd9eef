#!/usr/bin/env bash
# The whole test suite, as CI runs it: install, lint, type-check, check the layers, then every test
# (unit, integration on a real Postgres, e2e with real processes).
# Postgres: $DATABASE_URL if set, else an embedded pgserver under .treadle/test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh dev cloud
.venv/bin/ruff check core sidecar cloud functions infra layers tests scripts
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# the MCP Inspector CLI for tests/mcp/test_inspector.py (it skips where npm or the registry is missing)
if command -v npm >/dev/null && [ ! -d tests/mcp/inspector/node_modules/@modelcontextprotocol/inspector ]; then
  npm ci --prefix tests/mcp/inspector --no-audit --no-fund --ignore-scripts >/dev/null 2>&1 ||
    echo "· the MCP Inspector did not install: tests/mcp/test_inspector.py skips"
fi
# Mermaid's own parser for tests/teams/test_mermaid.py (it skips where npm or the registry is missing)
if command -v npm >/dev/null && [ ! -d tests/teams/mermaid/node_modules/mermaid ]; then
  npm ci --prefix tests/teams/mermaid --no-audit --no-fund --ignore-scripts >/dev/null 2>&1 ||
    echo "· the mermaid parser did not install: tests/teams/test_mermaid.py skips"
fi
# on every core (TREADLE_TEST_WORKERS=0 runs in this process); worksteal balances the long tests
.venv/bin/pytest -q -n "${TREADLE_TEST_WORKERS:-auto}" --dist worksteal "$@"
