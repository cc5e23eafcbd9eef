#!/usr/bin/env bash
# The Docker image, proven without a Docker daemon or Docker Hub (issue 43 item 3): builds the
# Dockerfile with buildah (vfs storage, chroot isolation) on a base made here from Debian's own
# packages (debootstrap: bookworm, Python 3.11, pip), runs the image, checks /healthz and a demo
# run through the served API, and stops it cleanly. Skips (exit 0, saying why) where buildah,
# debootstrap or root is missing, where buildah cannot make a container, or where debootstrap cannot
# fetch Debian's packages; a Dockerfile that does not build, or an image that does not serve, fails.
# ~3 minutes on 2 cores (a base, a pip install, vfs layer copies); the base stays in buildah's
# storage for the next run, the smoke image does not. .ci/run runs it unless TREADLE_IMAGE_SMOKE=0.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "image smoke skipped: $*"; exit 0; }
command -v buildah >/dev/null || skip "no buildah (apt-get install buildah debootstrap)"
command -v debootstrap >/dev/null || skip "no debootstrap (apt-get install debootstrap)"
[ "$(id -u)" = 0 ] || skip "not root (debootstrap needs it)"
export BUILDAH_ISOLATION=chroot STORAGE_DRIVER=vfs
B=(buildah --storage-driver vfs)
WORK=${TREADLE_IMAGE_WORK:-$PWD/.treadle/image}
MIRROR=${TREADLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$WORK"
t0=$(date +%s)
probe=$("${B[@]}" from scratch 2>"$WORK/probe.log") || skip "buildah cannot make a container here: $(tail -n 1 "$WORK/probe.log")"
"${B[@]}" rm "$probe" >/dev/null
"${B[@]}" rmi --prune >/dev/null 2>&1 || true  # an earlier run's dangling layers (vfs copies them whole)

# 1. the base: Debian bookworm minbase with Python and pip (what python:3.12-slim gives, one minor older)
if ! "${B[@]}" inspect --type image localhost/treadle-base >/dev/null 2>&1; then
  if [ ! -x "$WORK/rootfs/usr/bin/python3" ]; then
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
      bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -n 5 "$WORK/debootstrap.log"; rm -rf "$WORK/rootfs"; skip "debootstrap could not make the base from $MIRROR"; }
  fi
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" add "$ctr" "$WORK/rootfs" / >/dev/null
  # the host's trust store: a build behind an intercepting proxy verifies PyPI as the host does
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    "${B[@]}" add "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
  fi
  # Debian's pip refuses to install into its Python (PEP 668): this base is an image's, not a host's
  "${B[@]}" config --env PIP_BREAK_SYSTEM_PACKAGES=1 --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
  "${B[@]}" commit --quiet "$ctr" localhost/treadle-base >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
fi
t1=$(date +%s)

# 2. the Dockerfile, on that base
"${B[@]}" bud --quiet --layers=false --build-arg BASE=localhost/treadle-base -t localhost/treadle-smoke . \
  >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; exit 1; }
t2=$(date +%s)

# 3. run it (host network, a token, the embedded Postgres in its /data), check it, stop it
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token="smoke-$(date +%s%N)"
ctr=$("${B[@]}" from localhost/treadle-smoke)
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait "${pid:-}" 2>/dev/null || true
  "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
  "${B[@]}" rmi localhost/treadle-smoke >/dev/null 2>&1 || true
}
trap cleanup EXIT
"${B[@]}" run --network host --user treadle \
  --env TREADLE_AUTH_TOKEN="$token" --env TREADLE_LISTEN="127.0.0.1:$port" --env TREADLE_HOME=/data \
  --env TREADLE_CONFIG=/etc/treadle/treadle.yaml --env HOME=/home/treadle --workingdir /home/treadle \
  "$ctr" -- treadle serve >"$WORK/serve.log" 2>&1 &
pid=$!
python3 - "$port" "$token" <<'PY'
import json, sys, time, urllib.request

port, token = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
deadline = time.monotonic() + 120
while True:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
            assert r.status == 200
            break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the image's treadle serve never answered /healthz")
        time.sleep(0.5)
auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
# Accept: the 202 JSON answer (POST /v1/runs otherwise answers with the run's SSE stream)
req = urllib.request.Request(f"{base}/v1/runs", method="POST", headers={**auth, "Accept": "application/json"},
                             data=json.dumps({"agent": "demo", "prompt": "hello from the image"}).encode())
run_id = json.load(urllib.request.urlopen(req, timeout=10))["run_id"]
while True:
    run = json.load(urllib.request.urlopen(urllib.request.Request(f"{base}/v1/runs/{run_id}", headers=auth), timeout=10))
    if run["status"] in ("completed", "failed", "cancelled"):
        break
    if time.monotonic() > deadline:
        sys.exit(f"the demo run did not end: {run['status']}")
    time.sleep(0.3)
assert run["status"] == "completed", run
print(f"image smoke: /healthz 200, demo run {run_id} completed ({run['iterations']} iterations)")
PY
# stop it as a container runtime does: SIGTERM to the image's process (buildah's chroot isolation
# does not forward a signal sent to `buildah run`; the process is a descendant of it here)
descendants() { local c; for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done; }
serve_pid=
for p in $(descendants "$pid"); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "treadle serve"; then serve_pid=$p; fi
done
[ -n "$serve_pid" ] || { echo "no treadle serve process under buildah run $pid"; exit 1; }
kill -TERM "$serve_pid"
wait "$pid" && stopped=0 || stopped=$?
pid=
t3=$(date +%s)
# uvicorn ends by re-raising the signal it handled: 143 (128 + SIGTERM) after a complete shutdown
if { [ "$stopped" != 0 ] && [ "$stopped" != 143 ]; } || ! grep -q "Application shutdown complete" "$WORK/serve.log"; then
  tail -n 30 "$WORK/serve.log"; echo "treadle serve did not stop cleanly (exit $stopped)"; exit 1
fi
echo "image smoke passed: base $((t1 - t0)) s, build $((t2 - t1)) s, run and stop $((t3 - t2)) s"
