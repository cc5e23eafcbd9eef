#!/usr/bin/env bash
# From a fresh clone to a served runtime and a demo run shown live:
# installs into ./.venv, writes ./treadle.yaml if absent, starts `treadle serve` on the embedded
# Postgres (under ./.treadle), runs the `demo` agent and renders it, then keeps serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
[ -f treadle.yaml ] || treadle init
listen=${TREADLE_LISTEN:-127.0.0.1:8787}
url="http://$listen"
if curl -fsS "$url/healthz" >/dev/null 2>&1; then
  echo "treadle already serving at $url"
  server=""
else
  # the demo's own output is the run: treadle's INFO lines (run starts and ends, requests) stay off here
  TREADLE_LOG_LEVEL=${TREADLE_LOG_LEVEL:-warning} treadle serve --listen "$listen" &
  server=$!
  trap '[ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null' EXIT INT TERM
  for _ in $(seq 1 150); do
    curl -fsS "$url/healthz" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { echo "treadle serve exited; see above" >&2; exit 1; }
    sleep 0.2
  done
fi
echo
treadle run --url "$url" demo "Count your calls, then tell me how many you made."
echo
echo "treadle is serving at $url — watch runs live at $url/ui, API docs at $url/docs. Try:"
echo "  .venv/bin/treadle run --url $url scripted 'hello'"
echo "  .venv/bin/treadle runs --url $url          # then: treadle attach RUN, treadle answer RUN"
echo "  curl -s $url/v1/runs | python3 -m json.tool"
if [ -n "$server" ] && [ -z "${TREADLE_DEMO_EXIT:-}" ]; then
  echo "Ctrl-C stops it."
  wait "$server"
fi
