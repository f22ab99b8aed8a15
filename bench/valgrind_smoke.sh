#!/bin/sh
# valgrind_smoke.sh PROACTOR_TEST - the io_uring engine under valgrind.
#
# valgrind runs one thread of a program at a time and does not count
# io_uring_enter among the calls in which another thread may run, so a
# loop thread waiting in it used to hold up the program's other threads:
# proactor_test never got past connecting its sessions.  And memcheck does
# not see the kernel fill a read's buffer through io_uring, so it reported
# every check of the bytes read as a use of uninitialised memory.  Both
# runs here (one thread, then two, every echoed byte checked) must end
# well within the timeout with no error from memcheck.
#
# Exit: 0 both passed, 1 one failed (hung, or memcheck found an error),
# 77 valgrind is not installed or io_uring is not available here.
set -u
prog=${1:?usage: valgrind_smoke.sh PROACTOR_TEST}
command -v valgrind >/dev/null 2>&1 || { echo "skip: valgrind is not installed"; exit 77; }
command -v timeout >/dev/null 2>&1 || { echo "skip: timeout(1) is missing"; exit 77; }
fail=0
for args in "-s 1 -n 1" "-s 4 -n 2 -k 8192 -w 16384"; do
	# shellcheck disable=SC2086  # args is a list of words
	PX_ENGINE= timeout 90 valgrind -q --error-exitcode=9 \
		"$prog" -e uring $args -i 0.5 --check --verify
	rc=$?
	case $rc in
	0) echo "ok: proactor_test $args under valgrind" ;;
	77) echo "skip: io_uring is not available here"; exit 77 ;;
	124) echo "FAIL: proactor_test $args under valgrind still ran after 90 s"; fail=1 ;;
	9) echo "FAIL: memcheck reported errors for proactor_test $args"; fail=1 ;;
	*) echo "FAIL: proactor_test $args under valgrind exited $rc"; fail=1 ;;
	esac
done
exit $fail
