#!/bin/bash
# prepare_carry.sh - build here (sm_90a, release) and stage the binaries and
# the non-CUDA shared libraries they need in .gpucarry/ (git-ignored), for
# run.sh to fall back on if the device image cannot build the project.
# Then: run(command="bash tests/gpu/run.sh", carry=[".gpucarry"]).
set -eu
cd "$(dirname "$0")/../.."
grep -qx '/.gpucarry/' .git/info/exclude 2>/dev/null || echo '/.gpucarry/' >>.git/info/exclude
[ -d build-carry ] || meson setup build-carry -Dcuda=enabled -Dgpu_archs=90a --buildtype=release
ninja -C build-carry -j2
rm -rf .gpucarry; mkdir -p .gpucarry/bin .gpucarry/lib
for b in tests/gpu/test_gpu_kernels tests/gpu/test_gpu_engine tests/gpu/bench_gpu_kernels \
         daemon/tools/llama8-run daemon/tools/llama8-mkmodel daemon/llama8d client/llama8ctl; do
    [ -x "build-carry/$b" ] && cp "build-carry/$b" .gpucarry/bin/
done
find build-carry -name '*.so*' -type f -exec cp {} .gpucarry/lib/ \;
for f in .gpucarry/bin/*; do
    ldd "$f" | awk '/=> \// {print $3}' | grep -v -e cuda -e 'libc\.so' -e 'libm\.so' \
        -e ld-linux -e libpthread -e libdl -e librt | xargs -r -I{} cp -L {} .gpucarry/lib/
done
du -sh .gpucarry
