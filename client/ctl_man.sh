#!/bin/bash
# ctl_man.sh LLAMA8CTL - for help2man --include: a COMMANDS section with
# each llama8ctl command's own --help, as it prints it. The commands come
# from the completion's reading of llama8ctl --help, the one parser of it.
set -eu
ctl=$1
# shellcheck source=llama8-completion.bash
source "$(dirname "$0")/llama8-completion.bash"
echo '[COMMANDS]'
_llama8_commands "$ctl" | while read -r c _; do
    printf '.SS "llama8ctl %s"\n.nf\n' "$c"
    # roff: a backslash is \e, and a line may not start with a control character.
    "$ctl" "$c" --help | sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
    printf '.fi\n'
done
