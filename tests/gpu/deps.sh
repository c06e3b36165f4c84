# deps.sh - sourced by tests/gpu/run.sh: make the build's dependencies
# findable on a machine that lacks them (the GPU image may have no -dev
# packages, no pkg-config, no protoc-c), from the Debian packages that
# tests/gpu/prepare_carry.sh put in .gpucarry/debs.
#
#   l8_deps_check            0 when pkg-config finds every dependency and
#                            protoc-c is on PATH
#   l8_deps_sysroot DEBDIR   unpack every .deb into $L8_SYSROOT (dpkg -x, or
#                            a small Python ar/tar reader without dpkg), then
#                            export PKG_CONFIG_LIBDIR / PKG_CONFIG_SYSROOT_DIR
#                            (only the sysroot's .pc files: one consistent
#                            set), PATH (pkg-config, protoc-c) and
#                            LD_LIBRARY_PATH: a folder of links to just the
#                            sysroot libraries whose soname the system's
#                            loader does not already know, so system
#                            libraries are never shadowed by older ones.
# Set L8_FORCE_SYSROOT=1 to use the sysroot even where everything is found
# (how this was tested on the development machine).

L8_SYSROOT=${L8_SYSROOT:-/tmp/sysroot}
L8_DEPS_PC="json-c liburing libprotobuf-c libsystemd libpcre2-8"

l8_deps_check() {
    [ "${L8_FORCE_SYSROOT:-0}" = 1 ] && return 1
    command -v pkg-config >/dev/null 2>&1 || return 1
    command -v protoc-c >/dev/null 2>&1 || return 1
    local p
    for p in $L8_DEPS_PC; do
        pkg-config --exists "$p" 2>/dev/null || return 1
    done
    return 0
}

_l8_unpack_deb() {   # DEB DEST
    if command -v dpkg >/dev/null 2>&1; then
        dpkg -x "$1" "$2"
        return
    fi
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
with open(deb, "rb") as f:
    if f.read(8) != b"!<arch>\n":
        sys.exit("not an ar archive: " + deb)
    while True:
        h = f.read(60)
        if len(h) < 60:
            break
        name = h[:16].decode().strip().rstrip("/")
        size = int(h[48:58].decode().strip())
        data = f.read(size)
        if size % 2:
            f.read(1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                if hasattr(tarfile, "tar_filter"):
                    t.extractall(dest, filter="tar")
                else:
                    t.extractall(dest)
PY
}

l8_deps_sysroot() {   # DEBDIR
    local debdir=$1 d f name lib=$L8_SYSROOT/usr/lib/x86_64-linux-gnu
    ls "$debdir"/*.deb >/dev/null 2>&1 || { echo "deps: no .deb files in $debdir"; return 1; }
    rm -rf "$L8_SYSROOT" "$L8_SYSROOT-rt"
    mkdir -p "$L8_SYSROOT" "$L8_SYSROOT-rt"
    for d in "$debdir"/*.deb; do
        _l8_unpack_deb "$d" "$L8_SYSROOT" || { echo "deps: cannot unpack $d"; return 1; }
    done
    # Pre-merged-/usr packages put some libraries in /lib: one directory.
    if [ -d "$L8_SYSROOT/lib/x86_64-linux-gnu" ]; then
        mkdir -p "$lib"
        cp -an "$L8_SYSROOT/lib/x86_64-linux-gnu/." "$lib/"
    fi
    local known
    known=$(ldconfig -p 2>/dev/null)
    for f in "$lib"/lib*.so.*; do
        name=$(basename "$f")
        case "$name" in
            *.so.[0-9]|*.so.[0-9][0-9]) ;;   # sonames only (libfoo.so.5), not libfoo.so.5.2.0
            *) continue ;;
        esac
        if ! printf '%s\n' "$known" | grep -qF "$name ("; then
            ln -sf "$f" "$L8_SYSROOT-rt/$name"
        fi
    done
    export LD_LIBRARY_PATH=$L8_SYSROOT-rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$L8_SYSROOT/usr/bin:$PATH
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$L8_SYSROOT/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$L8_SYSROOT
    unset PKG_CONFIG_PATH
    echo "deps: sysroot $L8_SYSROOT from $(ls "$debdir"/*.deb | wc -l) packages;" \
         "libraries the loader lacked: $(ls "$L8_SYSROOT-rt" | tr '\n' ' ')"
    local p
    for p in $L8_DEPS_PC; do
        printf 'deps: %s %s: %s\n' "$p" "$(pkg-config --modversion "$p" 2>&1)" \
               "$(pkg-config --cflags --libs "$p" 2>&1)"
    done
    command -v protoc-c && protoc-c --version 2>&1 | head -1
}
