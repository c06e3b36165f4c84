#!/bin/bash
# test_install.sh MESON BUILD_DIR PREFIX - `meson install` into a DESTDIR
# puts the units where systemd looks for them (PREFIX/lib/systemd/system),
# sysusers.d and tmpfiles.d under PREFIX/lib, llama8d in PREFIX/sbin with
# the unit's ExecStart pointing at it, the client library's headers, the
# bash completion under both programs' names, the zsh completion where it
# finds the bash one's parser, the shell key bindings, the Python package,
# the Vim and Neovim packages, and the man pages when the build made them
# (help2man), which groff reads without a warning; outside /usr, llama8ctl
# runs without LD_LIBRARY_PATH on the installed library.
set -euo pipefail
meson=$1 build=$2 prefix=$3
d=$(mktemp -d "${TMPDIR:-/tmp}/l8-install.XXXXXX")
trap 'rm -rf "$d"' EXIT
"$meson" install -C "$build" --destdir "$d" --no-rebuild --quiet >"$d.log" 2>&1 ||
    { echo "FAIL: meson install"; cat "$d.log"; rm -f "$d.log"; exit 1; }
rm -f "$d.log"
fail=0
for f in lib/systemd/system/llama8d.service lib/systemd/system/llama8d.socket \
         lib/sysusers.d/llama8.conf lib/tmpfiles.d/llama8d.conf sbin/llama8d \
         include/llama8/llama8client.h include/llama8/llama8_tokenizer.h \
         include/llama8/llama8_event.h share/bash-completion/completions/llama8ctl \
         share/bash-completion/completions/llama8d \
         share/vim/vimfiles/pack/llama8/opt/llama8/plugin/llama8.vim \
         share/nvim/site/pack/llama8/opt/llama8/plugin/llama8.lua \
         share/llama8/shell/llama8.bash share/llama8/shell/llama8.zsh; do
    [ -e "$d$prefix/$f" ] || { echo "FAIL: $prefix/$f was not installed"; fail=1; }
done
for m in daemon/llama8d.8:man8 client/llama8ctl.1:man1; do
    page=${m%:*} sec=${m#*:}
    [ -f "$build/$page" ] || continue
    f=$d$prefix/share/man/$sec/$(basename "$page")
    if [ ! -f "$f" ]; then
        echo "FAIL: $prefix/share/man/$sec/$(basename "$page") was not installed"; fail=1
    elif command -v groff >/dev/null; then
        w=$(groff -man -ww -z -Tutf8 "$f" 2>&1)
        [ -z "$w" ] || { echo "FAIL: groff on $(basename "$page"): $w"; fail=1; }
    fi
done
[ -n "$(find "$d$prefix" -path '*-packages/llama8/__init__.py' 2>/dev/null)" ] ||
    { echo "FAIL: the Python package was not installed under $prefix"; fail=1; }
zshfn=$(find "$d$prefix/share/zsh" -name _llama8 2>/dev/null | head -1)
if [ -z "$zshfn" ]; then
    echo "FAIL: no zsh completion (_llama8) under $prefix/share/zsh"; fail=1
elif [ ! -e "$(dirname "$zshfn")/../../bash-completion/completions/llama8ctl" ]; then
    echo "FAIL: $zshfn does not find the bash completion at ../../bash-completion/completions"
    fail=1
fi
# Outside /usr, the installed programs find the installed library without
# LD_LIBRARY_PATH (a RUNPATH relative to themselves): not the build's copy.
if [ "$prefix" != /usr ]; then
    ctl=$d$prefix/bin/llama8ctl
    lib=$(env -u LD_LIBRARY_PATH ldd "$ctl" 2>&1 | awk '/libllama8client/ {print $3}')
    if ! env -u LD_LIBRARY_PATH "$ctl" --version >/dev/null 2>&1; then
        echo "FAIL: the installed llama8ctl does not start without LD_LIBRARY_PATH:"
        env -u LD_LIBRARY_PATH "$ctl" --version 2>&1 | head -3 || true; fail=1
    elif [ "$(realpath "$lib")" != "$(realpath "$(find "$d$prefix" -name libllama8client.so.0)")" ]
    then
        echo "FAIL: the installed llama8ctl loads $lib, not the installed library"; fail=1
    fi
fi
grep -q "^ExecStart=$prefix/sbin/llama8d " "$d$prefix/lib/systemd/system/llama8d.service" ||
    { echo "FAIL: the unit's ExecStart is not $prefix/sbin/llama8d"; fail=1; }
echo "installed under $d:"
(cd "$d" && find . -type f | sort)
exit $fail
