# llama8.bash - the llama8 key binding for bash; source it from ~/.bashrc:
#
#   source /usr/share/llama8/shell/llama8.bash
#
# Ctrl-X Ctrl-L sends the command line's text (a description, or a command
# begun), with the shell, the system and the directory's name, to llama8d
# (`llama8ctl suggest`) and puts the one command it suggests on the line, for
# review: nothing is run until you press Enter. On an error the line stays
# as it was and the reason is printed.
#
#   LLAMA8_SUGGEST_KEY   the key, in readline's notation, read when this file
#                        is sourced (default \C-x\C-l)
#   LLAMA8_CTL           the llama8ctl to run (default llama8ctl on $PATH)
#   LLAMA8_SOCKET        the daemon's socket, as for llama8ctl
#
# For the last failed command's output: `make 2>&1 | llama8ctl explain make`.

[[ $- == *i* ]] || return 0

__llama8_suggest()
{
    [[ -n ${READLINE_LINE//[[:space:]]/} ]] || return 0
    local out
    # stdin from /dev/null: suggest must not read the terminal's keys.
    if out=$("${LLAMA8_CTL:-llama8ctl}" suggest --shell bash -- "$READLINE_LINE" </dev/null) &&
        [[ -n $out ]]; then
        READLINE_LINE=$out
        READLINE_POINT=${#out}
    fi
}

bind -x "\"${LLAMA8_SUGGEST_KEY:-\C-x\C-l}\": __llama8_suggest"
