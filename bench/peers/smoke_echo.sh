#!/bin/sh
# smoke_echo.sh SERVER LOAD [LOAD ARGS...]: start SERVER on a free loopback
# port, run the load client LOAD against it, stop the server with SIGTERM.
# Exits non-zero if the load client fails or the server does not stop
# cleanly.
set -u
server=$1
load=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$server" -p 0 -b 127.0.0.1 >"$out" &
pid=$!
port=
i=0
while [ $i -lt 100 ]; do
	port=$(sed -n 's/.* port \([0-9][0-9]*\).*/\1/p' "$out" | head -n 1)
	[ -n "$port" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.05
	i=$((i + 1))
done
if [ -z "$port" ]; then
	echo "smoke_echo: $server printed no port" >&2
	cat "$out" >&2
	kill "$pid" 2>/dev/null
	exit 1
fi
"$load" -p "$port" "$@"
rc=$?
kill -TERM "$pid"
wait "$pid"
src=$?
cat "$out"
if [ $src -ne 0 ]; then
	echo "smoke_echo: $server exited $src after SIGTERM" >&2
	exit 1
fi
exit $rc
