#!/usr/bin/env bash
# Create ./.venv (if needed) and install treadle into it, with the extras named as arguments:
#   scripts/bootstrap.sh              the sidecar only (what `scripts/demo.sh` needs: ~30 s, ~100 MB)
#   scripts/bootstrap.sh dev cloud    + test tools and the cloud shape (what `scripts/test.sh` needs)
# Idempotent: an install is redone only when pyproject.toml changed or new extras are asked for.
# It says what it does; the pip output is kept in .venv/install.log (printed when pip fails).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras=$(IFS=,; echo "$*")
spec="."; [ -n "$extras" ] && spec=".[$extras]"
if [ ! -x .venv/bin/python ]; then
  echo "· creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
stamp=".venv/.treadle-installed${extras:+-${extras//,/-}}"
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ]; }
if fresh "$stamp" || { [ -z "$extras" ] && for f in .venv/.treadle-installed*; do fresh "$f" && exit 0; done; false; }; then
  exit 0  # installed already (any install has the sidecar's packages)
fi
what="treadle${extras:+ with $extras}"
echo "· installing $what into .venv (the first time takes a while; later runs skip this)"
start=$SECONDS
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# pip's own output goes to .venv/install.log; the terminal gets one line per package resolved
if ! .venv/bin/python -m pip install --progress-bar off -e "$spec" 2>&1 | tee .venv/install.log |
    awk '/^Collecting / { n++; printf "\r  %3d packages: %-48s", n, $2; fflush() } END { if (n) print "" }'; then
  tail -n 30 .venv/install.log >&2
  echo "pip could not install $what (the whole log: .venv/install.log)" >&2
  exit 1
fi
echo "· installed $what in $((SECONDS - start)) s"
touch "$stamp"
