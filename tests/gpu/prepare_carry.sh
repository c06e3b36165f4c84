#!/bin/bash
# prepare_carry.sh - stage here what tests/gpu/run.sh may need on the lent
# GPU machine and cannot fetch there (nothing outside it can be reached),
# in .gpucarry/ (git-ignored, well under the 64 MiB the working tree may
# carry):
#   debs/  the Debian packages of the build's dependencies: the -dev and
#          runtime packages of json-c, liburing, protobuf-c, libsystemd and
#          pcre2, protobuf-c-compiler (protoc-c) with libprotoc/libprotobuf,
#          and pkgconf. run.sh unpacks them into /tmp/sysroot (dpkg -x, or
#          Python when there is no dpkg) only when the image lacks one of
#          them, and points pkg-config, PATH and LD_LIBRARY_PATH there.
#   bin/   release binaries built here for sm_90a, the last resort when the
#          native build fails there (they need the same libraries: debs/).
# usage: tests/gpu/prepare_carry.sh [--debs-only]
# then:  run(command="bash tests/gpu/run.sh", carry=[".gpucarry"], timeout_s=560)
set -eu
cd "$(dirname "$0")/../.."
CARRY=.gpucarry
EXCL=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCL")"
grep -qx "/$CARRY/" "$EXCL" 2>/dev/null || echo "/$CARRY/" >>"$EXCL"
mkdir -p "$CARRY"   # (a folder-only pattern matches only an existing folder)
git check-ignore -q "$CARRY" || { echo "prepare_carry: $CARRY is not ignored by git" >&2; exit 1; }

# Runtime libraries the binaries load, their -dev packages, the protoc-c
# compiler and what it loads, and pkg-config itself.
PKGS="libjson-c-dev libjson-c5 liburing-dev liburing2 libprotobuf-c-dev libprotobuf-c1
      protobuf-c-compiler libprotoc32 libprotobuf32 libsystemd-dev libsystemd0
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      pkgconf pkgconf-bin libpkgconf3"
rm -rf "$CARRY/debs"
mkdir -p "$CARRY/debs"
# apt-get download writes into the current directory.
(cd "$CARRY/debs" && apt-get download $PKGS)
n=$(ls "$CARRY"/debs/*.deb | wc -l)
[ "$n" -ge 19 ] || { echo "prepare_carry: only $n packages downloaded" >&2; exit 1; }

if [ "${1:-}" != --debs-only ]; then
    [ -d build-carry ] || meson setup build-carry -Dcuda=enabled -Dgpu_archs=90a -Dman=disabled --buildtype=release
    ninja -C build-carry -j2
    rm -rf "$CARRY/bin"
    mkdir -p "$CARRY/bin"
    for b in tests/gpu/test_gpu_kernels tests/gpu/test_gpu_engine tests/gpu/bench_gpu_kernels \
             daemon/tools/llama8-run daemon/tools/llama8-mkmodel daemon/llama8d client/llama8ctl; do
        if [ -x "build-carry/$b" ]; then
            cp "build-carry/$b" "$CARRY/bin/"
        else
            echo "prepare_carry: build-carry/$b missing" >&2
            exit 1
        fi
    done
    git rev-parse HEAD >"$CARRY/bin/COMMIT"
fi
du -sh "$CARRY"
kb=$(du -sk "$CARRY" | cut -f1)
[ "$kb" -lt 40960 ] || { echo "prepare_carry: $CARRY is over 40 MiB" >&2; exit 1; }
