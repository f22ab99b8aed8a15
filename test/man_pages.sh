#!/bin/sh
# man_pages.sh SRCDIR - the manual pages cover the public API.
#
# Fails when
#   - a px_* function declared with PX_API in include/proactor.h has no
#     page docs/man/NAME.3;
#   - a page is a '.so' link to a page that does not exist, or the page it
#     resolves to does not name the function in its NAME section;
#   - a page lacks one of the sections every page has (NAME, SYNOPSIS,
#     DESCRIPTION, RETURN VALUE or, for the overview, none of those two,
#     THREAD SAFETY, SEE ALSO);
#   - a page in docs/man is not listed in docs/man/meson.build (it would
#     not be installed);
#   - man(1), when present, warns while rendering a page, or cannot find a
#     function's page in a tree laid out as `meson install` lays it out;
#   - README.md's summary of the API (the tables under "What it is")
#     does not name a function;
#   - (with man(1)) a function's prototype in its page's SYNOPSIS, as
#     rendered, differs from its declaration in include/proactor.h
#     (whitespace aside).
set -u
src=${1:?usage: man_pages.sh SRCDIR}
hdr=$src/include/proactor.h
dir=$src/docs/man
fail=0

err() {
	echo "FAIL: $*"
	fail=1
}

# The exported functions: every 'PX_API ... px_name(' declaration.
funcs=$(grep -E '^PX_API' "$hdr" | grep -oE '\bpx_[a-z0-9_]+\(' | tr -d '(' | sort -u)
[ -n "$funcs" ] || { echo "FAIL: no PX_API functions found in $hdr"; exit 1; }
n=0
for f in $funcs; do
	n=$((n + 1))
	page=$dir/$f.3
	if [ ! -f "$page" ]; then
		err "$f is declared in include/proactor.h but has no page docs/man/$f.3"
		continue
	fi
	target=$page
	so=$(sed -n 's/^\.so man3\/\(.*\)$/\1/p' "$page")
	if [ -n "$so" ]; then
		target=$dir/$so
		if [ ! -f "$target" ]; then
			err "docs/man/$f.3 links to $so, which does not exist"
			continue
		fi
	fi
	# The NAME line lists every function the page documents.
	if ! sed -n '/^\.SH NAME/{n;p;}' "$target" | grep -qE "(^|[ ,])$f(,| )"; then
		err "$(basename "$target") does not name $f in its NAME section"
	fi
	if ! sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' "$target" | grep -q "$f("; then
		err "$(basename "$target") has no prototype of $f in its SYNOPSIS"
	fi
done

# README's summary: the section "What it is" up to the next heading.
summary=$(sed -n '/^## What it is/,/^## A short example/p' "$src/README.md")
for f in $funcs; do
	printf '%s\n' "$summary" | grep -q "\`$f\`" ||
		err "README.md's API summary (\"What it is\") does not name $f"
done

for page in "$dir"/*.3; do
	b=$(basename "$page")
	grep -q "'$b'" "$dir/meson.build" || err "docs/man/$b is not listed in docs/man/meson.build"
	grep -q '^\.so ' "$page" && continue
	for sec in NAME SYNOPSIS DESCRIPTION 'THREAD SAFETY' 'SEE ALSO'; do
		grep -q "^\.SH $sec\$" "$page" || err "$b has no $sec section"
	done
	if [ "$b" != proactor.3 ]; then
		grep -q '^\.SH RETURN VALUE$' "$page" || err "$b has no RETURN VALUE section"
	fi
done

if command -v man >/dev/null 2>&1; then
	# Lay the pages out as an installed tree (MANDIR/man3/NAME.3) so the
	# '.so' links resolve as they will after meson install.
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir "$tmp/man3"
	cp "$dir"/*.3 "$tmp/man3/"
	for f in proactor $funcs; do
		man -w -M "$tmp" 3 "$f" >/dev/null 2>&1 ||
			err "man cannot find $f in an installed layout"
	done
	# Render each page once (a '.so' link renders its target).
	for page in "$tmp"/man3/*.3; do
		grep -q '^\.so ' "$page" && continue
		b=$(basename "$page" .3)
		MANWIDTH=80 man --warnings -l "$page" >"$tmp/$b.txt" 2>"$tmp/err"
		if [ -s "$tmp/err" ]; then
			err "man -l $b.3: $(cat "$tmp/err")"
		fi
		grep -q "$b" "$tmp/$b.txt" || err "man -l $b.3 renders no text naming $b"
	done
	# Each prototype as the pages rendered it (above) against the
	# header's declarations, each on one line with the blanks around
	# ( ) , * dropped: every declaration must be among the prototypes.
	norm() {
		tr -s ' \t' ' ' | sed 's/ *\([(),*]\) */\1/g; s/^ //; s/ $//'
	}
	awk '/^PX_API/ { p = 1; s = "" } p { s = s " " $0 } p && /;/ { print s; p = 0 }' "$hdr" |
		sed 's/^ *PX_API //; s/;.*//' | norm | sort -u >"$tmp/decls"
	for t in "$tmp"/*.txt; do
		sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' "$t" | tr '\n' ' '
		echo
	done | sed 's/#include <[^>]*>/;/g' | tr ';' '\n' | norm | sort -u >"$tmp/protos"
	comm -23 "$tmp/decls" "$tmp/protos" | while IFS= read -r d; do
		echo "FAIL: no page's SYNOPSIS renders the declaration '$d' of include/proactor.h"
	done >"$tmp/protofail"
	if [ -s "$tmp/protofail" ]; then
		cat "$tmp/protofail"
		fail=1
	fi
else
	echo "note: man(1) not installed; rendering not checked"
fi

[ $fail = 0 ] && echo "ok: $n public functions, each with a manual page"
exit $fail
