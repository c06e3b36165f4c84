# llama8.zsh - the llama8 key binding for zsh; source it from ~/.zshrc:
#
#   source /usr/share/llama8/shell/llama8.zsh
#
# Ctrl-X Ctrl-L sends the command line's text (a description, or a command
# begun), with the shell, the system and the directory's name, to llama8d
# (`llama8ctl suggest`) and puts the one command it suggests on the line, for
# review: nothing is run until you press Enter. On an error the line stays
# as it was and the reason shows below it.
#
#   LLAMA8_SUGGEST_KEY   the key, in bindkey's notation, read when this file
#                        is sourced (default ^X^L)
#   LLAMA8_CTL           the llama8ctl to run (default llama8ctl on $PATH)
#   LLAMA8_SOCKET        the daemon's socket, as for llama8ctl
#
# For the last failed command's output: `make 2>&1 | llama8ctl explain make`.

[[ -o interactive ]] || return 0

__llama8_suggest()
{
    [[ -n ${BUFFER//[[:space:]]/} ]] || return 0
    local out err
    err=$(mktemp -t llama8-suggest.XXXXXX) || return 1
    zle -R 'llama8: asking...'
    # stdin from /dev/null: suggest must not read the terminal's keys.
    if out=$(${LLAMA8_CTL:-llama8ctl} suggest --shell zsh -- "$BUFFER" </dev/null 2>$err) &&
        [[ -n $out ]]; then
        BUFFER=$out
        CURSOR=${#BUFFER}
        zle -M ''
    else
        zle -M "llama8: $(<$err)"
    fi
    rm -f -- $err
}

zle -N __llama8_suggest
bindkey "${LLAMA8_SUGGEST_KEY:-^X^L}" __llama8_suggest
