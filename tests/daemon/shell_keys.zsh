#!/usr/bin/env zsh
# shell_keys.zsh DIR LINE KEY COMMAND... - types LINE and then KEY into the
# interactive shell COMMAND runs on a pseudo-terminal, then Ctrl-X Ctrl-D,
# which the shell's rc file binds to writing its command line to DIR/line;
# prints that line. The rc file also appends a line to DIR/ran before each
# prompt: a command run by the keys would add one, and exits 1. Exit 77
# without zpty.
zmodload zsh/zpty 2>/dev/null || exit 77
dir=$1 line=$2 key=$3; shift 3
trap 'zpty -d s 2>/dev/null' EXIT
rm -f $dir/line $dir/ran
zpty s "${(j: :)${(q)@}}"
# The first prompt: the rc file is read.
for i in {1..500}; do [[ -s $dir/ran ]] && break; sleep 0.02; done
[[ -s $dir/ran ]] || { print -u2 "shell_keys: no prompt from $*"; exit 1 }
n=$(wc -l <$dir/ran)
zpty -w -n s "$line$key"$'\C-x\C-d'
for i in {1..1500}; do [[ -e $dir/line ]] && break; sleep 0.02; done
[[ -e $dir/line ]] || { print -u2 "shell_keys: the line was never written"; exit 1 }
sleep 0.3
(( $(wc -l <$dir/ran) == n )) || { print -u2 "shell_keys: the keys ran a command"; exit 1 }
zpty -w -n s $'\C-u'
print -rn -- "$(<$dir/line)"
