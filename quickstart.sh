#!/usr/bin/env bash
# quickstart.sh - the two commands of the README.
#
#   ./quickstart.sh          install what the build needs, build, write the
#                            synthetic "tiny" checkpoint, start llama8d on it
#                            and stream a chat reply with llama8ctl generate
#   ./quickstart.sh test     install, build, run the whole test suite
#
# Environment: BUILD (build dir, default build), MODEL (a checkpoint dir to
# serve instead of the synthetic one), MESON_ARGS (extra meson options).
set -euo pipefail
cd "$(dirname "$0")"

BUILD=${BUILD:-build}
DEBS="build-essential meson ninja-build pkg-config liburing-dev libprotobuf-c-dev
protobuf-c-compiler libsystemd-dev libjson-c-dev libpcre2-dev libedit-dev systemd help2man libmicrohttpd-dev"

install_deps() {
    local missing=()
    for p in $DEBS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "== installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

build() {
    if [ ! -f "$BUILD/build.ninja" ]; then
        # shellcheck disable=SC2086
        meson setup "$BUILD" ${MESON_ARGS:-}
    fi
    ninja -C "$BUILD"
}

run_tests() {
    # stdin closed: llama8ctl generate reads a stdin that is not a terminal
    # (TEXT + piped input), and an inherited pipe may never end.
    meson test -C "$BUILD" --print-errorlogs --num-processes "$(nproc)" "$@" </dev/null
}

main_job() {
    local model=${MODEL:-models/tiny}
    if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
        echo "== writing the synthetic tiny checkpoint to $model (random weights, real tokenizer)"
        "$BUILD/daemon/tools/llama8-mkmodel" --preset tiny --seed 1 --out "$model" \
            --tokenizer tests/golden/tokenizer/tokenizer.json
    fi
    local sock=${XDG_RUNTIME_DIR:-/tmp}/llama8d-quickstart.sock
    local log=$BUILD/llama8d-quickstart.log
    echo "== starting llama8d on $sock (log: $log)"
    "$BUILD/daemon/llama8d" --model "$model" --socket "$sock" 2>"$log" &
    daemon_pid=$!
    trap 'kill $daemon_pid 2>/dev/null; wait $daemon_pid 2>/dev/null' EXIT
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    echo "== llama8ctl generate (the synthetic model's weights are random: expect word salad)"
    LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" generate --max-new 48 \
        "Write a haiku about shared memory."
    echo
    echo "== llama8ctl status"
    LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" status
}

# The tests also drive the Vim and Neovim plugins (tests/daemon/test_vim.sh,
# test_nvim.sh), the zsh completion and the shells' key bindings (a real
# zsh: test_completion.sh, test_shell.sh), and the Python package
# (test_python.sh, pytest), and llama8-openai with curl and the openai npm
# client (test_openai.sh; npm only where the nodejs package has none).
if [ "${1:-run}" = test ]; then
    DEBS="$DEBS vim neovim zsh python3-pytest curl nodejs"
    command -v npm >/dev/null 2>&1 || DEBS="$DEBS npm"
fi
install_deps
build
case "${1:-run}" in
    run)  main_job ;;
    test) shift; run_tests "$@" ;;
    *)    echo "usage: $0 [run|test [meson test args]]" >&2; exit 2 ;;
esac
