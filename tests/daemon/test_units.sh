#!/bin/sh
# test_units.sh: the systemd units, sysusers.d and tmpfiles.d files as built.
#   test_units.sh UNITDIR SRCDIR [LLAMA8D [LLAMA8CTL]]
# UNITDIR: the build's systemd/ (configured llama8d.service, .socket,
# tmpfiles llama8d.conf); SRCDIR: the source systemd/ (sysusers.d, the
# example configuration); LLAMA8D, LLAMA8CTL: the built programs, used as
# ExecStart and ExecReload so systemd-analyze can check the commands exist
# (else /bin/true).
# Exit 0 pass, 1 fail, 77 skip (no systemd-analyze).
set -u
unitdir=$(cd "$1" && pwd) srcdir=$(cd "$2" && pwd) daemon=${3:-} ctl=${4:-}
command -v systemd-analyze >/dev/null 2>&1 || { echo "no systemd-analyze: skip"; exit 77; }

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. systemd-analyze verify: it exits 0 on unknown keys and bad values and
# only warns, so any output at all is a failure.
mkdir "$tmp/units"
cp "$unitdir/llama8d.service" "$unitdir/llama8d.socket" "$tmp/units/" || exit 1
# A built program's absolute path, or /bin/true.
exe() {
    case $1 in ''|/*) p=$1 ;; *) p=$PWD/$1 ;; esac
    if [ -n "$1" ] && [ -x "$p" ]; then echo "$p"; else echo /bin/true; fi
}
daemon=$(exe "$daemon") ctl=$(exe "$ctl")
sed -i -e "s#^ExecStart=[^ ]*#ExecStart=$daemon#" -e "s#^ExecReload=[^ ]*#ExecReload=$ctl#" \
    "$tmp/units/llama8d.service"
out=$(systemd-analyze verify "$tmp/units/llama8d.service" "$tmp/units/llama8d.socket" 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "systemd-analyze verify exited $rc"
[ -z "$out" ] || bad "systemd-analyze verify said: $out"

# 2. The settings the issue requires, exactly.
svc=$unitdir/llama8d.service sock=$unitdir/llama8d.socket
for kv in Type=notify NotifyAccess=main WatchdogSec=30 Restart=on-failure User=llama8 \
          Group=llama8 RuntimeDirectory=llama8d RuntimeDirectoryPreserve=yes \
          NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
          RestrictAddressFamilies=AF_UNIX DevicePolicy=closed \
          "DeviceAllow=/dev/nvidiactl rw" "DeviceAllow=/dev/nvidia0 rw" \
          SystemCallFilter=@system-service SystemCallArchitectures=native; do
    grep -qx "$kv" "$svc" || bad "llama8d.service lacks '$kv'"
done
for kv in "ExecStart=.*/llama8d --config /.*/llama8d/llama8d.conf" "ExecReload=/.*/llama8ctl reload"; do
    grep -qx "$kv" "$svc" || bad "llama8d.service lacks '$kv'"
done
grep -q '@[A-Z_]*@' "$svc" && bad "llama8d.service has an unsubstituted @VAR@"
for k in PrivateDevices=yes MemoryDenyWriteExecute=yes; do
    grep -qx "$k" "$svc" && bad "llama8d.service sets $k (breaks CUDA)"
done
for kv in ListenSequentialPacket=/run/llama8d/llama8d.sock SocketMode=0660 SocketUser=root \
          SocketGroup=llama8; do
    grep -qx "$kv" "$sock" || bad "llama8d.socket lacks '$kv'"
done

# 3. sysusers.d creates the user and its group, in a scratch root.
if command -v systemd-sysusers >/dev/null 2>&1; then
    mkdir -p "$tmp/root/etc"
    if systemd-sysusers --root="$tmp/root" "$srcdir/sysusers.d/llama8.conf" >/dev/null 2>&1; then
        grep -q '^llama8:x:[0-9]*:[0-9]*:' "$tmp/root/etc/passwd" || bad "sysusers: no llama8 user"
        grep -q '^llama8:x:[0-9]*:' "$tmp/root/etc/group" || bad "sysusers: no llama8 group"
    else
        bad "systemd-sysusers failed"
    fi
else
    echo "no systemd-sysusers: sysusers.d not checked"
fi

# 4. tmpfiles.d: makes the directories and copies the example once, never
# over an administrator's file.
if command -v systemd-tmpfiles >/dev/null 2>&1; then
    tf=$unitdir/llama8d.conf
    src=$(awk '$1 == "C" { print $7 }' "$tf")
    dst=$(awk '$1 == "C" { print $2 }' "$tf")
    mkdir -p "$tmp/root$(dirname "$src")"
    cp "$srcdir/llama8d.conf.example" "$tmp/root$src"
    systemd-tmpfiles --root="$tmp/root" --create "$tf" || bad "systemd-tmpfiles failed"
    [ -d "$tmp/root/var/lib/llama8d/models" ] || bad "tmpfiles: no models directory"
    cmp -s "$tmp/root$src" "$tmp/root$dst" || bad "tmpfiles: example not copied to $dst"
    echo "model = /srv/mine" > "$tmp/root$dst"
    systemd-tmpfiles --root="$tmp/root" --create "$tf" || bad "systemd-tmpfiles failed (2)"
    [ "$(cat "$tmp/root$dst")" = "model = /srv/mine" ] || bad "tmpfiles overwrote $dst"
else
    echo "no systemd-tmpfiles: tmpfiles.d not checked"
fi

[ $fail -eq 0 ] && echo "units ok (ExecStart checked with $daemon, ExecReload with $ctl)"
exit $fail
