#!/bin/sh
# ctl_man.sh LLAMA8CTL - for help2man --include: a COMMANDS section with
# each llama8ctl command's own --help, as it prints it.
set -eu
ctl=$1
echo '[COMMANDS]'
"$ctl" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z]*\) .*/\1/p' | while read -r c; do
    printf '.SS "llama8ctl %s"\n.nf\n' "$c"
    # roff: a backslash is \e, and a line may not start with a control character.
    "$ctl" "$c" --help | sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
    printf '.fi\n'
done
