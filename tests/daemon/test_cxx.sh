#!/bin/bash
# test_cxx.sh - the installed library from C++ and from C, with nothing but
# the install prefix: `meson install` into a DESTDIR, then
#  - each public header (llama8client.h, llama8_tokenizer.h, llama8_event.h)
#    compiles on its own as C17 and as C++17 (-Wall -Wextra -pedantic
#    -Werror), and llama8client.h does not pull the rings' l8_shm.h in;
#  - test_cxx.cc built with g++ -std=c++17 -Wall -Wextra -pedantic -Werror
#    and `pkg-config --cflags --libs llama8client`, run on the installed
#    library against a llama8d on the synthetic tiny model: its reply must
#    equal llama8ctl generate's;
#  - the README's example.c built the same way with cc -std=c17, likewise.
# Skipped (77) without g++ or pkg-config.
#   test_cxx.sh MESON BUILD_DIR PREFIX LIBDIR LLAMA8D LLAMA8CTL MKMODEL TOKENIZER TEST_CXX_CC EXAMPLE_C
set -euo pipefail
meson=$1 build=$2 prefix=$3 libdir=$4 daemon=$5 ctl=$6 mkmodel=$7 tokenizer=$8 src=$9 example=${10}
cxx=g++ cc=${CC:-cc}
command -v "$cxx" >/dev/null || { echo "SKIP: no $cxx"; exit 77; }
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
command -v "$cc" >/dev/null || cc=gcc
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac

. "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon cxx "$daemon" "$mkmodel" "$tokenizer"

d=$t/dest
"$meson" install -C "$build" --destdir "$d" --no-rebuild --quiet >"$t/install.log" 2>&1 ||
    { echo "FAIL: meson install"; cat "$t/install.log"; exit 1; }
export PKG_CONFIG_PATH=$d$libdir/pkgconfig
# The .pc names the real prefix; the files are under the DESTDIR.
pc() { pkg-config --define-variable=prefix="$d$prefix" "$@" llama8client; }
pc --exists || { echo "FAIL: no llama8client.pc under $d$libdir/pkgconfig"; exit 1; }
cflags=$(pc --cflags) libs=$(pc --libs)
# Only the installed headers: nothing of the source or build tree.
for f in $cflags $libs; do
    case $f in -I*|-L*) [[ ${f:2} == "$d"/* ]] || [[ ${f:2} == /usr/* ]] ||
        { echo "FAIL: pkg-config gives $f, outside the install prefix"; exit 1; } ;; esac
done
warn=(-Wall -Wextra -pedantic -Werror)
fail=0
for h in llama8client.h llama8_tokenizer.h llama8_event.h; do
    [ -f "$d$prefix/include/llama8/$h" ] || { echo "FAIL: $h was not installed"; fail=1; continue; }
    printf '#include <%s>\n#include <%s>\nint main(void) { return 0; }\n' "$h" "$h" >"$t/h.c"
    cp "$t/h.c" "$t/h.cc"
    "$cc" -std=c17 "${warn[@]}" $cflags -c "$t/h.c" -o "$t/h.o" ||
        { echo "FAIL: $h does not compile on its own as C17"; fail=1; }
    "$cxx" -std=c++17 "${warn[@]}" $cflags -c "$t/h.cc" -o "$t/h.o" ||
        { echo "FAIL: $h does not compile on its own as C++17"; fail=1; }
done
printf '#include <llama8client.h>\n' >"$t/h.c"
if "$cc" -std=c17 $cflags -M "$t/h.c" | grep -q 'l8_shm\.h'; then
    echo "FAIL: llama8client.h includes l8_shm.h (the rings are not the API)"; fail=1
fi
[ $fail = 0 ] || exit 1

"$cxx" -std=c++17 "${warn[@]}" "$src" $cflags $libs -o "$t/test_cxx" ||
    { echo "FAIL: test_cxx.cc does not build with $cxx -std=c++17 ${warn[*]}"; exit 1; }
"$cc" -std=c17 "${warn[@]}" "$example" $cflags $libs -o "$t/example" ||
    { echo "FAIL: example.c does not build with $cc -std=c17 ${warn[*]}"; exit 1; }
export LD_LIBRARY_PATH=$d$libdir
lib=$(ldd "$t/test_cxx" | awk '/libllama8client/ {print $3}')
[ "$(realpath "$lib")" = "$(realpath "$d$libdir/libllama8client.so.0")" ] ||
    { echo "FAIL: test_cxx loads $lib, not the installed library"; exit 1; }

q="Say hi"
"$ctl" generate --socket "$sock" --max-new 24 "$q" >"$t/want24.txt" ||
    { echo "FAIL: llama8ctl generate"; exit 1; }
"$ctl" generate --socket "$sock" --max-new 64 "$q" >"$t/want64.txt" ||
    { echo "FAIL: llama8ctl generate --max-new 64"; exit 1; }
[ -s "$t/want24.txt" ] || { echo "FAIL: empty reference reply"; exit 1; }
"$t/test_cxx" "$sock" "$q" >"$t/cxx.txt" 2>"$t/cxx.err" ||
    { echo "FAIL: test_cxx:"; cat "$t/cxx.err"; exit 1; }
cat "$t/cxx.err"
cmp -s "$t/cxx.txt" "$t/want24.txt" ||
    { echo "FAIL: the C++ program's reply differs from llama8ctl generate's:";
      diff "$t/cxx.txt" "$t/want24.txt" | head -20; exit 1; }
LLAMA8_SOCKET=$sock "$t/example" "$q" >"$t/example.txt" ||
    { echo "FAIL: the installed example"; exit 1; }
cmp -s "$t/example.txt" "$t/want64.txt" ||
    { echo "FAIL: the example's reply differs from llama8ctl generate's:";
      diff "$t/example.txt" "$t/want64.txt" | head -20; exit 1; }
echo "ok: C++17 and C17 programs on the installed headers and library" \
     "($(wc -c <"$t/cxx.txt") bytes of reply)"
