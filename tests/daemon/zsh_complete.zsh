#!/usr/bin/env zsh
# zsh_complete.zsh FPATHDIR LINE... - what zsh's completion offers at the end
# of each LINE, from a real interactive zsh (compinit, the completion
# functions of FPATHDIR first in $fpath) on a pseudo-terminal: prints
# "== LINE", then the matches, one per line, sorted. Exit 77 without zpty.
zmodload zsh/zpty 2>/dev/null || exit 77
fdir=$1; shift
out=$(mktemp) || exit 1
trap 'zpty -d c 2>/dev/null; rm -f $out' EXIT
zpty c zsh -f -i
zpty -w c "PS1='' PS2='' HISTFILE=/dev/null; unsetopt beep; exec 2>/dev/null"
zpty -w c "fpath=(${(q)fdir} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w c "OUT=${(q)out}"
# Every match a completion function adds is also written to OUT (compadd
# with -O, -A or -D only collects, and is left alone).
zpty -w c 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a h; builtin compadd -A h "$@"; (( $#h )) && print -rl -- $h >>$OUT; builtin compadd "$@"; }'
zpty -w c 'zstyle ":completion:*" menu no; LISTMAX=100000'
zpty -w c "print '<ready>' >>\$OUT"
for i in {1..500}; do grep -q '<ready>' $out && break; sleep 0.02; done
for line in "$@"; do
  # An empty answer is asked for once more: a loaded CI machine once gave
  # none for a line that has matches (not reproduced since); a line whose
  # answer is empty by right gives it twice.
  for try in 1 2; do
    : >$out
    # zle takes the keys in order: Tab, ^U (the line erased), then the
    # marker's command, which runs once the completion is over.
    zpty -w -n c "$line"$'\t\C-u'
    zpty -w c "print '<done>' >>\$OUT"
    for i in {1..500}; do grep -q '<done>' $out && break; sleep 0.02; done
    grep -q '<done>' $out || { print -u2 "zsh_complete: no answer for '$line'"; exit 1 }
    grep -qv '^<done>$' $out && break
  done
  print -r -- "== $line"
  grep -v '^<done>$' $out | sort -u
done
