#!/usr/bin/env bash
# Starts cellblockd on a private socket, runs examples/hello.py in a jail
# through the CLI, and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "the demo starts the privileged daemon: run it as root (sudo make demo)" >&2
	exit 1
fi
state=${CELLBLOCK_STATE_DIR:-/var/lib/cellblock}
rundir=$(mktemp -d /tmp/cellblock-demo.XXXXXX)
sock=$rundir/cellblockd.sock
bin/cellblockd --socket "$sock" --state-dir "$state" --log-format text 2>"$rundir/daemon.log" &
pid=$!
cleanup() {
	kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$rundir"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
	[ -S "$sock" ] && bin/cellblock --socket "$sock" info --json >/dev/null 2>&1 && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$rundir/daemon.log" >&2
		exit 1
	fi
	sleep 0.1
done
echo "\$ cellblock run examples/hello.py"
bin/cellblock --socket "$sock" run examples/hello.py
echo
echo "\$ cellblock run --memory 64M -c 'x = bytearray(1 << 30)'"
bin/cellblock --socket "$sock" run --memory 64M -c 'x = bytearray(1 << 30)' || echo "(exit code $?)"
echo
echo "\$ cellblock run --timeout 1s -c 'while True: pass'"
bin/cellblock --socket "$sock" run --timeout 1s -c 'while True: pass' || echo "(exit code $?)"
