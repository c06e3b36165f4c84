#!/bin/bash
# test_completion.sh SCRIPT LLAMA8CTL LLAMA8D [ZSHDIR ZSHDRIVER] - the bash
# completion offers what the programs accept: every command llama8ctl lists,
# every option of each command and of llama8d (each one tried on the real
# program: a flag leaves the next word alone, an option with a value takes
# it), the values of enumerated options (each tried on llama8d), files and
# directories where a path is asked for, nothing where a number is. Then the
# zsh completion (ZSHDIR/_llama8, through ZSHDRIVER in a real zsh; skipped
# without zsh) offers the same.
set -uo pipefail
script=$1 ctl=$2 daemon=$3 zdir=${4:-} zdriver=${5:-}
# Options need not work here: no daemon, no tokenizer.
export LLAMA8_SOCKET=/nonexistent/l8.sock LLAMA8_TOKENIZER=/nonexistent LLAMA8_MODEL=/nonexistent
# shellcheck source=/dev/null
source "$script" || { echo "FAIL: sourcing $script"; exit 1; }
# shellcheck disable=SC2317  # called by the script under test
compopt() { :; }   # a builtin that works only inside a real completion

fail=0
bad() { echo "FAIL: $*"; fail=1; }

# comp FUNC WORD... - complete the last word as bash would; prints the
# offers sorted, space-separated.
comp()
{
    local fn=$1
    shift
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    "$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]:-}"
    printf '%s\n' "${COMPREPLY[@]}" | sort | xargs echo
}

expect()
{
    local want=$1 got
    shift
    got=$(comp "$@")
    [[ $got == "$want" ]] || bad "completing '${*:2}': got '$got', want '$want'"
}

# grep reads it all: with -q it could exit at the first line, and a help
# longer than stdio's buffer (generate's) would then die of SIGPIPE, which
# pipefail reports.
prints_usage() { timeout 10 "$@" </dev/null 2>/dev/null | grep -i '^usage:' >/dev/null; }

# --- llama8ctl: its commands, and each command's options on the program.
cmds=$(comp _llama8ctl "$ctl" "")
[[ $(wc -w <<<"$cmds") -ge 7 ]] || bad "llama8ctl commands: '$cmds'"
for c in $cmds; do
    prints_usage "$ctl" "$c" --help || bad "'llama8ctl $c --help' fails: '$c' is no command"
done
expect generate _llama8ctl "$ctl" gen
for c in $cmds; do
    _llama8_opts "$ctl" "$c"   # fills the cache here, not in comp's subshells
done
n_opts=0
for c in $cmds; do
    opts=$(comp _llama8ctl "$ctl" "$c" -)   # short ones too
    [[ -n $opts ]] || bad "no options offered for llama8ctl $c"
    for o in $opts; do
        n_opts=$((n_opts + 1))
        [[ $o == --help || $o == -h ]] && continue
        # What follows the option: nothing offered means a value (or a
        # free word), options offered again means a flag.
        after=$(comp _llama8ctl "$ctl" "$c" "$o" --)
        if [[ -n $after ]]; then
            prints_usage "$ctl" "$c" "$o" --help ||
                bad "llama8ctl $c: '$o' is offered as a flag, but '$c $o --help' does not print the usage"
        else
            prints_usage "$ctl" "$c" "$o" 1 --help ||
                bad "llama8ctl $c: '$o 1 --help' does not print the usage (no such option?)"
            ! prints_usage "$ctl" "$c" "$o" --help ||
                bad "llama8ctl $c: '$o' is offered as taking a value, but it leaves --help alone"
        fi
    done
done
[[ $n_opts -ge 40 ]] || bad "only $n_opts llama8ctl options in all: is --help still parsed?"
expect "--top-k --top-p" _llama8ctl "$ctl" generate --top
expect "" _llama8ctl "$ctl" generate --max-new ""
expect "--help --version" _llama8ctl "$ctl" --

# --- llama8d: every option is a configuration key; enumerated values.
_llama8_opts "$daemon"
# shellcheck disable=SC2154  # set by the script under test
dlines=$_llama8_optlines
dopts=$(comp _llama8d "$daemon" --)
[[ $(wc -w <<<"$dopts") -ge 20 ]] || bad "llama8d options: '$dopts'"
while read -r o placeholder; do
    [[ $o == --help || $o == --version ]] && continue
    # The listed values each; for a number, a path or a group, one.
    case $placeholder in
    *'|'* | BOOL) vals=$(comp _llama8d "$daemon" "$o" "") ;;
    *) vals=1 ;;
    esac
    for v in $vals; do
        err=$(timeout 10 "$daemon" "$o" "$v" --model /nonexistent/x 2>&1 >/dev/null)
        if grep -q "unknown option\|bad value" <<<"$err"; then
            bad "llama8d $o $v: $err"
        fi
    done
done <<<"$dlines"
expect "auto cpu cuda" _llama8d "$daemon" --backend ""
expect "cuda" _llama8d "$daemon" --backend = cu
expect "debug err info notice warning" _llama8d "$daemon" --log-level ""
expect "auto exact fp8" _llama8d "$daemon" --numerics ""
expect "off shared user" _llama8d "$daemon" --prefix-cache ""
expect "auto" _llama8d "$daemon" --spin-us ""
expect "false true" _llama8d "$daemon" --no-warmup ""
expect "" _llama8d "$daemon" --kv-pages ""
expect "--kv-mib --kv-pages" _llama8d "$daemon" --kv

# --- bash runs a completion in the shell itself: --help is read once there.
_llama8_help_cache=()
COMP_WORDS=("$daemon" --kv)
COMP_CWORD=1
_llama8d "$daemon"
[[ -n ${_llama8_help_cache[$daemon]+set} ]] ||
    bad "a completion left llama8d's --help uncached (read at every Tab)"

# --- paths: directories for DIR, files and directories for FILE / PATH.
t=$(mktemp -d "${TMPDIR:-/tmp}/l8-comp.XXXXXX")
trap 'rm -rf "$t"' EXIT
mkdir "$t/dir"
: >"$t/file"
expect "$t/dir" _llama8d "$daemon" --model "$t/"
expect "$t/dir $t/file" _llama8d "$daemon" --config "$t/"
expect "$t/dir $t/file" _llama8ctl "$ctl" generate --socket "$t/"
expect "$t/dir $t/file" _llama8ctl "$ctl" tokenize --tokenizer "$t/"
expect "$t/dir $t/file" _llama8ctl "$ctl" tokenize -t "$t/"
expect "" _llama8ctl "$ctl" tokenize -s ""
expect "-c" _llama8ctl "$ctl" tokenize -c

# --- zsh: the same offers, and the same paths by their names (zsh shows
# the last part of a path).
zsh_said="zsh: not tried (no zsh with zpty)"
if [[ -n $zdir ]] && command -v zsh >/dev/null && zsh -fc 'zmodload zsh/zpty' 2>/dev/null; then
    lines=() wants=()
    want() { lines+=("$1"); wants+=("$2"); }
    want "$ctl " "$cmds"
    for c in $cmds; do
        want "$ctl $c -" "$(comp _llama8ctl "$ctl" "$c" -)"
    done
    want "$ctl generate --top" "--top-k --top-p"
    want "$ctl generate --max-new " ""
    want "$daemon --" "$dopts"
    while read -r o placeholder; do
        [[ $placeholder == *'|'* || $placeholder == BOOL ]] &&
            want "$daemon $o " "$(comp _llama8d "$daemon" "$o" "")"
    done <<<"$dlines"
    want "$daemon --backend=cu" "cuda"
    want "$daemon --model $t/" "dir"
    want "$daemon --config $t/" "dir file"
    want "$ctl tokenize -t $t/" "dir file"
    want "$ctl generate --socket $t/f" "file"
    got=$(zsh "$zdriver" "$zdir" "${lines[@]}") || bad "zsh_complete.zsh failed"
    i=-1 offers=()
    while IFS= read -r l; do
        if [[ $l == "== "* ]]; then
            i=$((i + 1)) offers[i]=
        elif ((i >= 0)); then
            offers[i]+="${offers[i]:+ }$l"
        fi
    done <<<"$got"
    for ((i = 0; i < ${#lines[@]}; i++)); do
        [[ ${offers[i]-missing} == "${wants[i]}" ]] ||
            bad "zsh, completing '${lines[i]}': got '${offers[i]-(no answer)}', want '${wants[i]}'"
    done
    zsh_said="zsh: the same offers on ${#lines[@]} lines"
fi

[[ $fail == 0 ]] && echo "ok: $(wc -w <<<"$cmds") commands, $n_opts llama8ctl options, $(wc -w <<<"$dopts") llama8d options; $zsh_said"
exit $fail
