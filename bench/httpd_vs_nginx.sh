#!/bin/sh
# httpd_vs_nginx.sh - requests/s of examples/httpd against nginx, side by side.
#
#   bench/httpd_vs_nginx.sh [ENGINE ...]        (default: auto)
#
# Serves one file of FILE_SIZE bytes (default 4096) from a temporary root
# with nginx (WORKERS worker processes, access log off, sendfile on as in
# Debian's shipped nginx.conf, keep-alive without a request limit) and with
# examples/httpd -t WORKERS on each ENGINE, and loads each with
# `wrk -t2 -c100 -dDURATION` in interleaved rounds (nginx, then the engines,
# the order rotating each round), so that a slow spell of a shared machine
# hits every server.  Prints each run, then per server the median, min and
# max requests/s, and the ratio of each engine's median to nginx's.  Each
# run also reports the server's CPU time per request (user + system of
# the httpd process, or of nginx's master and workers, over the run): on
# a shared machine that moves less than requests/s, which also depend on
# how much CPU wrk and the neighbours leave to the server.
#
# Environment: BUILD (default build-release, set up with meson if missing),
# ROUNDS (3), DURATION (5s), CONNS (100), WRK_THREADS (2), WORKERS (2),
# FILE_SIZE (4096), NGINX_PORT (18080), HTTPD_PORT (18081 and up),
# HTTPD_OPTS (more httpd options, e.g. -N: no small-file cache),
# NGINX_EXTRA (more directives for nginx's http block, e.g.
# "open_file_cache max=1000;", nginx's counterpart of httpd's cache).
# Installs nginx and wrk with apt-get when they are missing.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$here/build-release}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-100}
WRK_THREADS=${WRK_THREADS:-2}
WORKERS=${WORKERS:-2}
FILE_SIZE=${FILE_SIZE:-4096}
NGINX_PORT=${NGINX_PORT:-18080}
HTTPD_PORT=${HTTPD_PORT:-18081}
[ $# -gt 0 ] || set -- auto

missing=
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
if [ -n "$missing" ]; then
	echo "installing$missing" >&2
	apt-get install -y $missing >/dev/null || {
		apt-get update >/dev/null && apt-get install -y $missing >/dev/null; }
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

if [ ! -x "$BUILD/examples/httpd" ]; then
	[ -d "$BUILD" ] || meson setup "$BUILD" "$here" -Dbuildtype=release \
		-Db_ndebug=true -Dtests=true >/dev/null
	ninja -C "$BUILD" examples/httpd >/dev/null
fi

tmp=$(mktemp -d)
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# nginx's workers run as an unprivileged user when started as root.
chmod 755 "$tmp"
mkdir -p "$tmp/root" "$tmp/nginx/logs"
head -c "$FILE_SIZE" /dev/urandom >"$tmp/root/file.bin"
# httpd caches only files not modified in the last seconds.
touch -d '1 minute ago' "$tmp/root/file.bin"
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes $WORKERS;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 65;
    default_type application/octet-stream;
    ${NGINX_EXTRA:-}
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $tmp/root;
    }
}
EOF
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" 2>"$tmp/nginx/stderr" &
pids="$pids $!"
nginx_pid=$!

# CPU ticks (user + system) of a process and its children processes.
cpu_ticks() {
	for p in $1 $(ps -o pid= --ppid "$1"); do
		awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null
	done | awk '{ t += $1 } END { print t + 0 }'
}
hz=$(getconf CLK_TCK)

# Servers: name pid url
servers="nginx $nginx_pid http://127.0.0.1:$NGINX_PORT/file.bin"
port=$HTTPD_PORT
for e in "$@"; do
	"$BUILD/examples/httpd" -p "$port" -b 127.0.0.1 -r "$tmp/root" \
		-t "$WORKERS" -e "$e" ${HTTPD_OPTS:-} >"$tmp/httpd-$port.out" 2>&1 &
	pids="$pids $!"
	servers="$servers
httpd:$e $! http://127.0.0.1:$port/file.bin"
	port=$((port + 1))
done

# Wait until each answers.
echo "$servers" | while read -r name pid url; do
	i=0
	until curl -sf -o /dev/null "$url"; do
		i=$((i + 1))
		if [ $i -gt 50 ]; then
			echo "$name does not answer at $url" >&2
			cat "$tmp"/httpd-*.out "$tmp/nginx/stderr" \
				"$tmp/nginx/logs/error.log" >&2
			touch "$tmp/failed"
			break
		fi
		sleep 0.1
	done
done
[ ! -e "$tmp/failed" ] || exit 1
for f in "$tmp"/httpd-*.out; do head -1 "$f"; done
echo "nginx: $("$NGINX" -v 2>&1), $WORKERS workers; wrk -t$WRK_THREADS -c$CONNS -d$DURATION; file $FILE_SIZE bytes; $ROUNDS rounds"

nserv=$(echo "$servers" | wc -l)
: >"$tmp/results"
r=1
while [ $r -le "$ROUNDS" ]; do
	# Rotate the order each round.
	k=0
	while [ $k -lt "$nserv" ]; do
		line=$(echo "$servers" | sed -n "$(( (k + r - 1) % nserv + 1 ))p")
		set -- $line
		name=$1 pid=$2 url=$3
		c0=$(cpu_ticks "$pid")
		out=$(wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" "$url")
		c1=$(cpu_ticks "$pid")
		rps=$(echo "$out" | awk '/^Requests\/sec:/ { print $2 }')
		nreq=$(echo "$out" | awk '/requests in/ { print $1 }')
		us=$(echo "$c0 $c1 $nreq" | awk -v hz="$hz" '{ printf "%.2f", ($2 - $1) / hz / $3 * 1e6 }')
		errs=$(echo "$out" | awk '/Non-2xx|Socket errors/ { printf "%s ", $0 }')
		echo "round $r  $name  $rps req/s  $us us CPU/request ${errs:+ ($errs)}"
		echo "$name $rps $us" >>"$tmp/results"
		k=$((k + 1))
	done
	r=$((r + 1))
done

echo
median() {
	sort -g | awk '{ v[NR] = $1 } END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%s %s %s %d\n", m, v[1], v[NR], NR }'
}
echo "$servers" | while read -r name pid url; do
	set -- $(grep "^$name " "$tmp/results" | awk '{ print $2 }' | median)
	set -- "$@" $(grep "^$name " "$tmp/results" | awk '{ print $3 }' | median)
	echo "$name $*"
done >"$tmp/summary"
awk '{ printf "%-24s median %8.0f req/s (min %.0f, max %.0f, %d runs); CPU %.2f us/request (min %.2f, max %.2f)\n",
	$1, $2, $3, $4, $5, $6, $7, $8 }' "$tmp/summary"
ng=$(awk '$1 == "nginx" { print $2 }' "$tmp/summary")
ngc=$(awk '$1 == "nginx" { print $6 }' "$tmp/summary")
awk -v ng="$ng" -v ngc="$ngc" '$1 != "nginx" {
	printf "%-24s %.2fx nginx requests/s, %.2fx nginx CPU per request\n", $1, $2 / ng, $6 / ngc }' "$tmp/summary"
