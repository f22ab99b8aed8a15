#!/usr/bin/env bash
# Build the libFuzzer targets (test/fuzz/) with clang and run each one.
#
#   scripts/fuzz.sh [SECONDS]          (default 60 per target)
#   scripts/fuzz.sh --build            build only (CI does it beforehand)
#
# Targets: fuzz_config (configuration parser, round-trip oracle) and
# fuzz_api (public API, exactly-once oracle; engine from PX_FUZZ_ENGINE,
# default epoll).  The library sources are compiled once, with
# -fsanitize=fuzzer,address,undefined, and linked into both targets; the
# two targets then run side by side, each for the full time.  Work goes to
# PX_FUZZ_DIR (default build-fuzz/ in the tree): the grown corpora, and
# crash inputs under artifacts/.  The seed corpora in test/fuzz/ are only
# read.  Targets built earlier into the same directory are used again
# when no source of the library, of the targets or this script has
# changed since.  Installs clang and its runtime first when missing (as
# root).
# PX_FUZZ_SANITIZER=thread builds and runs them under ThreadSanitizer
# instead of ASan+UBSan (default directory build-fuzz-tsan/; the targets
# run with address-space randomisation off and test/fuzz/tsan.supp), for
# fuzz_api with loop threads (PX_FUZZ_THREADS=N).
# Exit status: 0 when no target found anything.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build_only=false
if [ "${1:-}" = --build ]; then
	build_only=true
	shift
fi
secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
san=${PX_FUZZ_SANITIZER:-address}
case $san in
address) sanflags=fuzzer,address,undefined; out=${PX_FUZZ_DIR:-$here/build-fuzz} ;;
thread) sanflags=fuzzer,thread; out=${PX_FUZZ_DIR:-$here/build-fuzz-tsan} ;;
*) echo "$0: PX_FUZZ_SANITIZER is address or thread" >&2; exit 2 ;;
esac
cc=${CC_FUZZ:-clang}

probe() { # can cc build and link a libFuzzer program?
	printf '%s\n' '#include <stdint.h>' '#include <stddef.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' |
		"$cc" -fsanitize=$sanflags -x c - -o "$out/probe" 2>/dev/null
}

mkdir -p "$out"
if ! command -v "$cc" >/dev/null 2>&1 || ! probe; then
	if [ "$(id -u)" != 0 ]; then
		echo "fuzz: $cc with the libFuzzer runtime is missing (run as root to install clang)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends clang >/dev/null
	ver=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n 1)
	apt-get install -y -qq --no-install-recommends "libclang-rt-$ver-dev" >/dev/null 2>&1 || true
	probe || { echo "fuzz: clang cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi

# The library, as meson builds it: every source of its directories, the
# io_uring parts only with liburing.
# (A provider's class file, NAME_class.c, is included by providers/classes.c,
# never compiled alone.)
srcs=$(cd "$here" && ls proactor/*.c config/*.c providers/*.c wait_strategies/*.c interrupt/*.c |
	grep -v '_class\.c$')
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=$sanflags -std=c11 -D_GNU_SOURCE -I$here/include -I$here/proactor"
libs="-lpthread"
if pkg-config --exists liburing 2>/dev/null; then
	flags="$flags -DPX_HAVE_URING=1 $(pkg-config --cflags liburing)"
	libs="$libs $(pkg-config --libs liburing)"
else
	srcs=$(printf '%s\n' $srcs | grep -v -e '^providers/uring.c$' -e '^wait_strategies/uring.c$')
fi

if [ -f /usr/include/libaio.h ]; then
	flags="$flags -DPX_HAVE_LIBAIO=1"
	libs="$libs -laio"
else
	srcs=$(printf '%s\n' $srcs | grep -v -e '^providers/linux_aio.c$' \
		-e '^wait_strategies/aio_getevents.c$' -e '^wait_strategies/aio_epoll.c$')
fi

# Built already, by --build, from the same sources?
stamp="$out/built"
if [ -f "$stamp" ] && [ -x "$out/fuzz_config" ] && [ -x "$out/fuzz_api" ] &&
   [ -z "$(find "$here/include" "$here/proactor" "$here/config" "$here/providers" \
		"$here/wait_strategies" "$here/interrupt" "$here/test/fuzz" "$0" \
		-newer "$stamp" -print -quit)" ]; then
	prebuilt=true
else
	prebuilt=false
	rm -f "$stamp"
fi

# side_by_side STEP T1 T2: STEP on both at once (one after the other on a
# single CPU), each one's output printed in order once both are done;
# fails if either failed.
side_by_side() {
	local step=$1 rc=0 t i=0; shift
	if [ "$(nproc)" -lt 2 ]; then
		for t in "$@"; do "$step" "$t" || rc=1; done
		return $rc
	fi
	local pids=()
	for t in "$@"; do
		"$step" "$t" >"$out/$t.$step.out" 2>&1 &
		pids+=($!)
	done
	for t in "$@"; do
		wait "${pids[$i]}" || rc=1
		cat "$out/$t.$step.out"
		i=$((i + 1))
	done
	return $rc
}

# The library's objects are compiled once for both targets, as many at a
# time as there are CPUs; then each target's own file, linked with them.
objdir="$out/obj"
objs=$(printf '%s\n' $srcs | tr / _ | sed "s|^|$objdir/|; s|\\.c\$|.o|")
compile_one() { # source (relative to the tree) -> $objdir/dir_name.o
	local o=${1//\//_}
	$cc $flags -c "$1" -o "$objdir/${o%.c}.o"
}
build_one() { # target
	echo "== fuzz: building $1"
	(cd "$here" && $cc $flags test/fuzz/$1.c $objs $libs -o "$out/$1") 2>&1
}
build_all() {
	rm -rf "$objdir"
	mkdir -p "$objdir"
	echo "== fuzz: building the library ($(printf '%s\n' $srcs | wc -l) sources, $(nproc) at a time)"
	export -f compile_one
	export cc flags objdir
	printf '%s\n' $srcs | (cd "$here" && xargs -P "$(nproc)" -I{} bash -c 'compile_one "$1"' _ {})
	side_by_side build_one fuzz_config fuzz_api
	touch "$stamp"
}

run_one() { # target
	local t=$1 seeds corpus
	seeds="$here/test/fuzz/corpus_${t#fuzz_}"
	corpus="$out/corpus_${t#fuzz_}"
	mkdir -p "$corpus" "$out/artifacts"
	echo "== fuzz: running $t for $secs s${PX_FUZZ_ENGINE:+ (engine $PX_FUZZ_ENGINE)}"
	# libFuzzer stops itself after max_total_time; the outer timeout only
	# guards against a hang in its shutdown.
	local wrap=()
	if [ "$san" = thread ]; then
		# TSan's shadow memory needs a fixed layout; the suppressions
		# cover libFuzzer's own coverage counters.
		# report_signal_unsafe=0: libFuzzer's handlers for SIGTERM,
		# SIGINT and a unit's timeout (SIGALRM) allocate; TSan reports
		# each allocation as a signal-unsafe call, and after a SIGTERM
		# the report's death callback allocated again and the process
		# waited for itself forever, using no CPU (TESTING.md,
		# "Fuzzing").  The library's own signal handlers are checked by
		# the TSan test suite, which keeps the default.
		# (Set for the fuzzer's command only: exported here, each
		# target would append the options to the previous target's.)
		wrap=(env "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0 suppressions=$here/test/fuzz/tsan.supp${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
		      setarch "$(uname -m)" -R)
	else
		# A UBSan report stops the run and keeps its input (by
		# default UBSan prints and goes on, and a fuzzer found a NULL
		# + 0 that way on 2026-12-04 without saying so).
		wrap=(env "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}")
	fi
	if ! timeout -k 10 $((secs + 60)) "${wrap[@]}" "$out/$t" -max_total_time="$secs" \
		-timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
		-artifact_prefix="$out/artifacts/$t-" "$corpus" "$seeds" \
		>"$out/$t.log" 2>&1; then
		echo "== fuzz: $t FAILED (log: $out/$t.log; inputs: $out/artifacts/)"
		grep -E '^(==[0-9]+==ERROR|WARNING: ThreadSanitizer|fuzz_|proactor:|SUMMARY|.*runtime error)' "$out/$t.log" | head -n 20 || true
		return 1
	fi
	grep -E '^(Done|stat::number_of_executed_units)' "$out/$t.log" | head -n 1 || true
	echo "== fuzz: $t: nothing found"
}

if $prebuilt; then
	echo "== fuzz: the targets built at $(date -r "$stamp" +%T) are up to date"
else
	build_all
fi
$build_only && exit 0
# The two targets run side by side: each libFuzzer run is one process, so
# on two or more CPUs that halves the wall time and leaves every target its
# full run.
status=0
side_by_side run_one fuzz_config fuzz_api || status=1
exit $status
