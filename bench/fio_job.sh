#!/usr/bin/env bash
# fio_job.sh - the file_test job run by fio, for the ratio file_test/fio.
#
# Same file, block size, queue depth, read share and time as file_test;
# prints one line in file_test's key=value style:
#   result prog=fio engine="io_uring" depth=Q ... iops=N MBps=M ...
# Async engines (io_uring, libaio, posixaio) get N jobs (-n, default 1, as
# file_test's threads) sharing the depth: iodepth=Q/N each; psync, which has
# one operation per thread, gets Q jobs of depth 1 so the same number of
# operations is in flight.  O_DIRECT unless --buffered.
set -euo pipefail

usage() {
	cat <<EOF
usage: fio_job.sh -f PATH [-E IOENGINE] [-S SIZE] [-k BLOCK] [-q DEPTH]
                  [-n JOBS] [-r READ_PERCENT] [-i SECONDS] [-j JSON_OUT] [--buffered]

  -f PATH      file to run on (fio fills it to SIZE if it is shorter)
  -E ENGINE    io_uring (default), libaio, posixaio or psync
  -S SIZE      file size, e.g. 64m (default 64m)
  -k BLOCK     bytes per operation (default 4096)
  -q DEPTH     operations in flight in all (default 32)
  -n JOBS      fio jobs (threads) sharing DEPTH for async engines (default 1)
  -r PERCENT   share of reads: 100 randread (default), 0 randwrite, else randrw
  -i SECONDS   run time (default 2)
  -j FILE      also keep fio's JSON output in FILE
  --buffered   no O_DIRECT
Exit: 0 ok, 1 fio failed, 2 bad usage, 77 fio or the engine is missing.
EOF
}

path="" engine=io_uring size=64m block=4096 depth=32 njobs=1 rpct=100 secs=2 json="" direct=1
while [ $# -gt 0 ]; do
	case "$1" in
	-f) path=${2:?}; shift 2 ;;
	-E) engine=${2:?}; shift 2 ;;
	-S) size=${2:?}; shift 2 ;;
	-k) block=${2:?}; shift 2 ;;
	-q) depth=${2:?}; shift 2 ;;
	-n) njobs=${2:?}; shift 2 ;;
	-r) rpct=${2:?}; shift 2 ;;
	-i) secs=${2:?}; shift 2 ;;
	-j) json=${2:?}; shift 2 ;;
	--buffered) direct=0; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "fio_job.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
done
[ -n "$path" ] || { echo "fio_job.sh: -f PATH is required" >&2; usage >&2; exit 2; }
case "$engine" in io_uring|libaio|posixaio|psync) ;; *)
	echo "fio_job.sh: engine must be io_uring, libaio, posixaio or psync, not '$engine'" >&2
	exit 2 ;;
esac
for v in "$block" "$depth" "$njobs" "$rpct"; do
	case "$v" in ''|*[!0-9]*) echo "fio_job.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
command -v fio >/dev/null || { echo "fio_job.sh: fio is not installed" >&2; exit 77; }

if [ "$rpct" -ge 100 ]; then rw=randread
elif [ "$rpct" -le 0 ]; then rw=randwrite
else rw=randrw; fi

[ "$njobs" -ge 1 ] && [ "$depth" -ge "$njobs" ] ||
	{ echo "fio_job.sh: -n must be 1..DEPTH" >&2; exit 2; }
jobs=$njobs iodepth=$((depth / njobs))
if [ "$engine" = psync ]; then jobs=$depth iodepth=1; fi

out=$(mktemp)
trap 'rm -f "$out" "$out.err"' EXIT
# Whole seconds for fio's runtime, at least one.
rt=$(python3 -c "import math,sys; print(max(1, math.ceil(float(sys.argv[1]))))" "$secs")
if ! fio --name=file_test --filename="$path" --size="$size" --bs="$block" \
	--rw="$rw" --rwmixread="$rpct" --ioengine="$engine" --iodepth="$iodepth" \
	--numjobs="$jobs" --group_reporting --direct="$direct" --time_based \
	--runtime="$rt" --randrepeat=0 --norandommap --output-format=json \
	--output="$out" >/dev/null 2>"$out.err"; then
	cat "$out.err" >&2
	missing=0
	grep -qi "failed to load engine\|engine.*not" "$out.err" && missing=1
	rm -f "$out.err"
	[ "$missing" = 0 ] || exit 77
	exit 1
fi
rm -f "$out.err"
[ -z "$json" ] || cp "$out" "$json"

python3 - "$out" "$engine" "$depth" "$jobs" "$block" "$rpct" "$direct" <<'EOF'
import json, sys
path, engine, depth, jobs, block, rpct, direct = sys.argv[1:]
text = open(path).read()
doc = json.loads(text[text.index('{'):])        # fio may print notes first
job = doc["jobs"][0]
rd, wr = job["read"], job["write"]
secs = max(rd["runtime"], wr["runtime"]) / 1000.0
ops = rd["total_ios"] + wr["total_ios"]
iops = rd["iops"] + wr["iops"]
mbps = (rd["io_bytes"] + wr["io_bytes"]) / secs / 1e6 if secs > 0 else 0.0
print(f'result prog=fio engine="{engine}" depth={depth} threads={jobs} '
      f'block={block} read_pct={rpct} direct={direct} seconds={secs:.3f} '
      f'ops={ops} iops={iops:.0f} MBps={mbps:.3f} reads={rd["total_ios"]} '
      f'writes={wr["total_ios"]} errors={job.get("error", 0)}')
EOF
