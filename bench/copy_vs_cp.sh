#!/bin/sh
# copy_vs_cp.sh - examples/copy against cp and dd, on the disk rather than
# the page cache.
#
#   bench/copy_vs_cp.sh [ENGINE ...]          (default: auto)
#
# Makes a file of SIZE_MB MiB of random bytes in DIR, then copies it in
# interleaved rounds with: cp; dd bs=1M (buffered); dd bs=1M iflag=direct
# oflag=direct; and examples/copy buffered and --direct on each ENGINE.
# Before every copy the page cache is dropped (sync; echo 3 >
# /proc/sys/vm/drop_caches, which needs root and a writable /proc/sys), so
# the source comes from the disk; each copy is timed up to a sync of the
# destination, so that a buffered copy pays for its writes too.  Without
# drop_caches the script says so and the figures are for a cached source.
# Prints each run, then per method the median, min and max MB/s (10^6
# bytes per second).
#
# Environment: BUILD (default build-release, set up with meson if missing),
# DIR (default /var/tmp), SIZE_MB (1024), ROUNDS (3), DEPTH (16), BLOCK (1M).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$here/build-release}
DIR=${DIR:-/var/tmp}
SIZE_MB=${SIZE_MB:-1024}
ROUNDS=${ROUNDS:-3}
DEPTH=${DEPTH:-16}
BLOCK=${BLOCK:-1M}
[ $# -gt 0 ] || set -- auto

if [ ! -x "$BUILD/examples/copy" ]; then
	[ -d "$BUILD" ] || meson setup "$BUILD" "$here" -Dbuildtype=release \
		-Db_ndebug=true -Dtests=true >/dev/null
	ninja -C "$BUILD" examples/copy >/dev/null
fi
COPY=$BUILD/examples/copy

tmp=$(mktemp -d "$DIR/copy_vs_cp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
src=$tmp/src
dst=$tmp/dst

echo "making $SIZE_MB MiB of random bytes in $tmp ($(df -T "$DIR" | awk 'NR == 2 { print $2 }'))"
dd if=/dev/urandom of="$src" bs=1M count="$SIZE_MB" status=none
sync
size=$(stat -c %s "$src")

drop=yes
if ! (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
	drop=no
	echo "NOTE: cannot write /proc/sys/vm/drop_caches here: the source is read from the page cache"
fi

now() { date +%s.%N; }

# Methods: one line each, "name<TAB>command" (run by sh -c, with $src and
# $dst exported).
methods="cp	cp \"\$src\" \"\$dst\"
dd	dd if=\"\$src\" of=\"\$dst\" bs=1M status=none
dd-direct	dd if=\"\$src\" of=\"\$dst\" bs=1M iflag=direct oflag=direct status=none"
for e in "$@"; do
	methods="$methods
copy:$e	\"$COPY\" -e '$e' -d $DEPTH -b $BLOCK \"\$src\" \"\$dst\" >/dev/null
copy:$e-direct	\"$COPY\" -e '$e' -d $DEPTH -b $BLOCK --direct \"\$src\" \"\$dst\" >/dev/null"
done
export src dst
n=$(echo "$methods" | wc -l)
echo "$SIZE_MB MiB, $ROUNDS rounds, order rotating each round, page cache dropped before each copy: $drop"

: >"$tmp/results"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	k=0
	while [ "$k" -lt "$n" ]; do
		line=$(echo "$methods" | sed -n "$(( (k + r - 1) % n + 1 ))p")
		name=$(printf '%s' "$line" | cut -f1)
		cmd=$(printf '%s' "$line" | cut -f2-)
		rm -f "$dst"
		sync
		[ "$drop" = no ] || echo 3 >/proc/sys/vm/drop_caches
		t0=$(now)
		sh -c "$cmd"
		sync "$dst"
		t1=$(now)
		if ! cmp -s "$src" "$dst"; then
			echo "$name: the copy differs from the source" >&2
			exit 1
		fi
		mbs=$(echo "$t0 $t1" | awk -v s="$size" '{ printf "%.1f", s / 1e6 / ($2 - $1) }')
		echo "round $r  $name  $mbs MB/s"
		echo "$name $mbs" >>"$tmp/results"
		k=$((k + 1))
	done
	r=$((r + 1))
done

echo
echo "$methods" | cut -f1 | while read -r name; do
	grep "^$name " "$tmp/results" | awk '{ print $2 }' | sort -g |
		awk -v n="$name" '{ v[NR] = $1 } END {
			m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%-22s median %8.1f MB/s  (min %.1f, max %.1f, %d runs)\n",
				n, m, v[1], v[NR], NR }'
done
