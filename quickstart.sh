#!/usr/bin/env bash
# quickstart.sh - the two commands of the README.
#
#   ./quickstart.sh          install what the build needs, build, write the
#                            synthetic "tiny" checkpoint, start llama8d on it,
#                            stream a chat reply with llama8ctl generate and
#                            print the next steps; llama8d stops at the end
#   ./quickstart.sh --keep   the same, and llama8d keeps running (how to stop
#                            it is printed), for llama8ctl chat next
#   ./quickstart.sh test     install, build, run the whole test suite
#   ./quickstart.sh next     print the next steps again (installs and builds
#                            nothing)
#
# Environment: BUILD (build dir, default build), MODEL (a checkpoint dir to
# serve instead of the synthetic one), MESON_ARGS (extra meson options).
# Sourced (". quickstart.sh") it only defines its functions, for the tests
# (tests/daemon/test_first_run.sh runs main_job and next_steps).
set -euo pipefail

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

# The socket the synthetic run serves on, and where a kept llama8d's pid is.
quickstart_sock() { echo "${XDG_RUNTIME_DIR:-/tmp}/llama8d-quickstart.sock"; }
quickstart_pidfile() { echo "$BUILD/llama8d-quickstart.pid"; }

# What a new user wants after the first reply: a chat, the service, the real
# model (the README's "Installing it as a service" and "Using the real
# model"). $1: the socket; $2: "kept" when a llama8d still listens there.
next_steps() {
    local sock=$1 kept=${2:-}
    echo "== next steps"
    if [ "$kept" = kept ]; then
        echo "  1. chat with the model llama8d keeps serving:"
        echo "       LLAMA8_SOCKET=$sock $BUILD/client/llama8ctl chat"
    else
        echo "  1. chat with it (--keep leaves llama8d running for that):"
        echo "       ${MODEL:+MODEL=$MODEL }$([ "$BUILD" = build ] || echo "BUILD=$BUILD ")./quickstart.sh --keep"
        echo "       LLAMA8_SOCKET=$sock $BUILD/client/llama8ctl chat"
    fi
    echo "  2. install it as a service (README: Installing it as a service):"
    echo "       meson configure $BUILD --prefix=/usr && ninja -C $BUILD && sudo meson install -C $BUILD"
    echo "       sudo systemd-sysusers && sudo systemd-tmpfiles --create"
    echo "       # put the model under /var/lib/llama8d/models/, set model = in /etc/llama8d/llama8d.conf"
    echo "       sudo usermod -aG llama8 \"\$USER\" && sudo systemctl enable --now llama8d.socket"
    echo "  3. serve the real model (README: Using the real model): download"
    echo "     RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic from Hugging Face into a directory, then"
    echo "       MODEL=/path/to/Meta-Llama-3.1-8B-Instruct-FP8-dynamic ./quickstart.sh"
}

# The synthetic run; $1 "--keep": leave llama8d running.
main_job() {
    local keep=${1:-}
    local model=${MODEL:-models/tiny}
    if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
        echo "== writing the synthetic tiny checkpoint to $model (random weights, real tokenizer)"
        "$BUILD/daemon/tools/llama8-mkmodel" --preset tiny --seed 1 --out "$model" \
            --tokenizer tests/golden/tokenizer/tokenizer.json
    fi
    local sock pidfile
    sock=$(quickstart_sock)
    pidfile=$(quickstart_pidfile)
    local log=$BUILD/llama8d-quickstart.log
    # One kept by an earlier --keep would take the run's requests unseen.
    if [ -S "$sock" ] && LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" status >/dev/null 2>&1; then
        echo "== a llama8d already listens on $sock (pid $(cat "$pidfile" 2>/dev/null || echo '?')," \
             "kept by --keep?): stop it first (kill PID), or chat with it:" >&2
        echo "   LLAMA8_SOCKET=$sock $BUILD/client/llama8ctl chat" >&2
        return 1
    fi
    echo "== starting llama8d on $sock (log: $log)"
    # Nothing of the caller's held open: a kept llama8d outlives a pipe the
    # run's output goes to.
    "$BUILD/daemon/llama8d" --model "$model" --socket "$sock" </dev/null >/dev/null 2>"$log" &
    daemon_pid=$!
    if [ "$keep" = --keep ]; then
        echo "$daemon_pid" >"$pidfile"
        # Said last, whatever happened before.
        # shellcheck disable=SC2064  # the values now: at exit, main_job's locals are gone
        trap "echo '== llama8d keeps running (pid $daemon_pid, log: $log); stop it with: kill $daemon_pid'" EXIT
    else
        trap 'kill $daemon_pid 2>/dev/null; wait $daemon_pid 2>/dev/null' EXIT
    fi
    for _ in $(seq 100); do
        [ -S "$sock" ] && break
        kill -0 "$daemon_pid" 2>/dev/null || { echo "== llama8d failed to start:"; cat "$log"; return 1; }
        sleep 0.1
    done
    echo "== llama8ctl generate (the synthetic model's weights are random: expect word salad)"
    LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" generate --max-new 48 \
        "Write a haiku about shared memory."
    echo
    echo "== llama8ctl status"
    LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" status
    echo
    next_steps "$sock" "$([ "$keep" = --keep ] && echo kept)"
}

# Sourced: the functions only.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

cd "$(dirname "$0")"
[ "${1:-}" = --keep ] && set -- run "$@"
# The tests also drive the Vim and Neovim plugins (tests/daemon/test_vim.sh,
# test_nvim.sh), the zsh completion and the shells' key bindings (a real
# zsh: test_completion.sh, test_shell.sh), and the Python package
# (test_python.sh, pytest), and llama8-openai with curl and the openai npm
# client (test_openai.sh; npm only where the nodejs package has none).
if [ "${1:-run}" = test ]; then
    DEBS="$DEBS vim neovim zsh python3-pytest curl nodejs"
    command -v npm >/dev/null 2>&1 || DEBS="$DEBS npm"
fi
usage() { echo "usage: $0 [--keep | run [--keep] | test [meson test args] | next]" >&2; exit 2; }
case "${1:-run}" in
    run)
        [ $# -le 1 ] || { [ $# -eq 2 ] && [ "$2" = --keep ]; } || usage
        install_deps
        build
        main_job "${2:-}"
        ;;
    test) shift; install_deps; build; run_tests "$@" ;;
    next)
        sock=$(quickstart_sock)
        kept=
        [ -S "$sock" ] && [ -x "$BUILD/client/llama8ctl" ] &&
            LLAMA8_SOCKET=$sock "$BUILD/client/llama8ctl" status >/dev/null 2>&1 && kept=kept
        next_steps "$sock" "$kept"
        ;;
    *) usage ;;
esac
