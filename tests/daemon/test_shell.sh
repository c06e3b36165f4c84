#!/bin/bash
# test_shell.sh LLAMA8D LLAMA8CTL LLAMA8-MKMODEL TOKENIZER SHELLDIR DRIVER - the
# shell integrations against a real daemon (synthetic tiny model, real
# tokenizer): in a real interactive bash and zsh on a pseudo-terminal
# (DRIVER, shell_keys.zsh), the key puts on the command line what `llama8ctl
# suggest` prints for its text, one line, and runs nothing; the key can be
# changed; without a daemon the line stays as typed. Then `llama8ctl explain`
# on a failed command's output, a long one, and none. Skipped (77) without
# zsh and its zpty module.
set -uo pipefail
daemon=$(realpath "$1") ctl=$(realpath "$2") mkmodel=$(realpath "$3") tokenizer=$(realpath "$4")
shelldir=$(realpath "$5") driver=$(realpath "$6")
command -v zsh >/dev/null && zsh -fc 'zmodload zsh/zpty' 2>/dev/null ||
    { echo "no zsh with zpty: skipped"; exit 77; }

# shellcheck source=tiny_daemon.sh
source "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon shell "$daemon" "$mkmodel" "$tokenizer"
export LLAMA8_SOCKET=$sock
fail=0
bad() { echo "FAIL: $*"; fail=1; }

mkdir -p "$t/proj" "$t/zdot"
cd "$t/proj" || exit 1
text="list the files here, newest first"

# The rc files: the integration, a key that writes the line to $t/line, a
# line in $t/ran before each prompt.
cat >"$t/bashrc" <<RC
PS1='\$ '; HISTFILE=/dev/null; LLAMA8_CTL='$ctl'
source '$shelldir/llama8.bash'
bind -x '"\C-x\C-d": printf "%s" "\$READLINE_LINE" >$t/line'
PROMPT_COMMAND='echo ran >>$t/ran'
RC
cat >"$t/zdot/.zshrc" <<RC
PS1='\$ '; HISTFILE=/dev/null; LLAMA8_CTL='$ctl'
source '$shelldir/llama8.zsh'
__dump() { print -rn -- "\$BUFFER" >$t/line }
zle -N __dump; bindkey '^X^D' __dump
precmd() { echo ran >>$t/ran }
RC

for sh in bash zsh; do
    want=$("$ctl" suggest --shell $sh -- "$text") || bad "llama8ctl suggest --shell $sh failed"
    [[ -n $want && $want != *$'\n'* ]] || bad "suggest --shell $sh: not one line: '$want'"
    if [ $sh = bash ]; then
        got=$(zsh -f "$driver" "$t" "$text" $'\cx\cl' bash --rcfile "$t/bashrc" --noprofile -i)
    else
        got=$(zsh -f "$driver" "$t" "$text" $'\cx\cl' env ZDOTDIR="$t/zdot" zsh -i)
    fi || bad "$sh: the key binding (driver failed)"
    [[ $got == "$want" ]] || bad "$sh: the line after Ctrl-X Ctrl-L is '$got', llama8ctl suggest says '$want'"
    echo "$sh: '$text' -> '$got'"
done

# Another key, set before sourcing.
sed -i "1i LLAMA8_SUGGEST_KEY='\\\\C-x\\\\C-k'" "$t/bashrc"
want=$("$ctl" suggest --shell bash -- "$text")
got=$(zsh -f "$driver" "$t" "$text" $'\cx\ck' bash --rcfile "$t/bashrc" --noprofile -i) ||
    bad "bash, LLAMA8_SUGGEST_KEY: driver failed"
[[ $got == "$want" ]] || bad "bash with LLAMA8_SUGGEST_KEY=\\C-x\\C-k: the line is '$got', want '$want'"

# No daemon: the line stays as typed, in both shells.
for sh in bash zsh; do
    if [ $sh = bash ]; then
        got=$(LLAMA8_SOCKET=$t/none.sock zsh -f "$driver" "$t" "$text" $'\cx\ck' \
              bash --rcfile "$t/bashrc" --noprofile -i)
    else
        got=$(LLAMA8_SOCKET=$t/none.sock zsh -f "$driver" "$t" "$text" $'\cx\cl' \
              env ZDOTDIR="$t/zdot" zsh -i)
    fi || bad "$sh without a daemon: driver failed"
    [[ $got == "$text" ]] || bad "$sh without a daemon: the line became '$got'"
done

# suggest needs its text.
"$ctl" suggest >/dev/null 2>"$t/err"; rc=$?
[[ $rc == 2 ]] && grep -q "give the text" "$t/err" || bad "suggest without TEXT: status $rc, '$(cat "$t/err")'"

# explain: a reply to a failed command's output.
out=$(printf 'cc: error: main.c: No such file or directory\ncc: fatal error: no input files\n' |
      "$ctl" explain --max-new 24 cc main.c) || bad "explain failed"
[[ -n $out ]] || bad "explain printed nothing"
# A long output: its tail only, so the prompt stays small.
yes 'make[2]: *** [Makefile:12: all] Error 1' | head -c 1000000 >"$t/long.txt"
"$ctl" explain --max-new 4 --stats make <"$t/long.txt" >/dev/null 2>"$t/stats" ||
    bad "explain on 1 MB of output failed: $(cat "$t/stats")"
prompt=$(sed -n 's/^llama8ctl: \([0-9]*\) prompt tokens.*/\1/p' "$t/stats")
[[ -n $prompt && $prompt -lt 6000 ]] || bad "explain on 1 MB: prompt '$prompt' tokens ($(cat "$t/stats"))"
# Nothing piped in.
"$ctl" explain make </dev/null >/dev/null 2>"$t/err"; rc=$?
[[ $rc == 1 ]] && grep -q "stdin was empty" "$t/err" || bad "explain on empty stdin: status $rc, '$(cat "$t/err")'"

[ $fail = 0 ] && echo ok
exit $fail
