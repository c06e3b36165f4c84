# bash completion for llama8ctl and llama8d (installed under both names in
# bash-completion's completions directory; or source it from ~/.bashrc).
#
# The options come from the programs' own --help, read once per shell and
# program, so they cannot drift from what the programs accept:
#   - an option line is one whose first non-blank is '-'; its options stand
#     in the first column ("-t, --tokenizer FILE", "--top-k K  --top-p P"),
#     the description after 2+ spaces and a word that is not an option;
#   - an upper-case word after an option is its value (FILE, N, ...); a
#     description that opens with a|b|c lists the values it takes; a short
#     option takes what the long one beside it takes;
#   - "usage:" lines add their [--option VALUE] groups.
# Values: FILE and PATH complete file names, DIR directories, GROUP groups,
# BOOL true/false, a|b|c its words; the rest (numbers, text) nothing.

declare -gA _llama8_help_cache

# Sets _llama8_optlines to "OPTION VALUE" lines (VALUE: the placeholder,
# "a|b|c", or "-" for a flag) for the program and subcommand given. Not
# printed: in a $(...) subshell the cache would be lost.
_llama8_opts()
{
    local key="$*"
    if [[ -z ${_llama8_help_cache[$key]+set} ]]; then
        _llama8_help_cache[$key]=$("$@" --help 2>/dev/null | _llama8_parse_help |
                                   awk '!seen[$1]++')
    fi
    _llama8_optlines=${_llama8_help_cache[$key]}
}

# "NAME DESCRIPTION" lines: the commands: section of llama8ctl --help ($1).
_llama8_commands()
{
    "$1" --help 2>/dev/null | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z]*\)  *\(.*\)/\1 \2/p'
}

# The option lines of _llama8_opts, printed (for zsh's completion, which runs
# this script's parser through bash).
_llama8_print_opts()
{
    _llama8_opts "$@"
    printf '%s' "$_llama8_optlines"
}

_llama8_parse_help()
{
    local line col desc item name val shorts re_usage='\[(--[a-z0-9-]+)( [A-Z][A-Z_]*)?\]'
    while IFS= read -r line; do
        if [[ ${line,,} == usage:* ]]; then
            while [[ $line =~ $re_usage ]]; do
                val=${BASH_REMATCH[2]# }
                printf '%s %s\n' "${BASH_REMATCH[1]}" "${val:--}"
                line=${line#*"${BASH_REMATCH[0]}"}
            done
            continue
        fi
        line=${line#"${line%%[! ]*}"}
        [[ $line == -* ]] || continue
        # The column ends at the first run of 2+ spaces not followed by '-'.
        col=$line desc=
        if [[ $line =~ ^(.*[^ ])\ {2,}([^ -].*)$ ]]; then
            col=${BASH_REMATCH[1]} desc=${BASH_REMATCH[2]}
            while [[ $col =~ ^(.*[^ ])\ {2,}([^ -].*)$ ]]; do
                col=${BASH_REMATCH[1]} desc="${BASH_REMATCH[2]}  $desc"
            done
        fi
        col=${col//, /  }
        shorts=()
        while [[ -n $col ]]; do
            item=${col%%  *}
            [[ $item == "$col" ]] && col= || col=${col#*  }
            col=${col#"${col%%[! ]*}"}
            # "-t, --tokenizer FILE": -t takes what --tokenizer takes.
            if [[ $item =~ ^-[a-zA-Z]$ ]]; then
                shorts+=("$item")
                continue
            fi
            [[ $item == --* ]] || continue
            # A long option can push its description to one space after it.
            read -r name val _ <<<"$item"
            [[ $val =~ ^[A-Z][A-Z_]*$|\| ]] || val=-
            if [[ $desc =~ ^([a-z0-9]+(\|[A-Za-z0-9]+)+) ]]; then
                val=${BASH_REMATCH[1]}
            fi
            for name in "$name" "${shorts[@]}"; do
                printf '%s %s\n' "$name" "$val"
            done
            shorts=()
        done
    done
}

# Completes the value of an option whose placeholder is $1.
_llama8_value()
{
    local val=$1 cur=$2 w words=()
    case $val in
    FILE | PATH) compopt -o filenames; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
    DIR) compopt -o filenames; mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
    GROUP) mapfile -t COMPREPLY < <(compgen -g -- "$cur") ;;
    BOOL) mapfile -t COMPREPLY < <(compgen -W "true false" -- "$cur") ;;
    *'|'*)
        for w in ${val//|/ }; do
            [[ $w == *[a-z]* ]] && words+=("$w")   # not the US of auto|US
        done
        mapfile -t COMPREPLY < <(compgen -W "${words[*]}" -- "$cur")
        ;;
    *) COMPREPLY=() ;;
    esac
}

# Completes the word under the cursor for program "$@" (and subcommand).
_llama8_complete()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev='' name val opts
    _llama8_opts "$@"
    opts=$_llama8_optlines
    # --opt=value: bash splits it into "--opt" "=" "value".
    if ((COMP_CWORD >= 2)) && [[ ${COMP_WORDS[COMP_CWORD - 1]} == = ]]; then
        prev=${COMP_WORDS[COMP_CWORD - 2]}
    elif [[ $cur == = ]] && ((COMP_CWORD >= 1)); then
        prev=${COMP_WORDS[COMP_CWORD - 1]} cur=
    elif ((COMP_CWORD >= 1)); then
        prev=${COMP_WORDS[COMP_CWORD - 1]}
        [[ $prev == --*=* ]] && prev=
    fi
    if [[ $prev == -* ]]; then
        while read -r name val; do
            if [[ $name == "$prev" && $val != - ]]; then
                _llama8_value "$val" "$cur"
                return
            fi
        done <<<"$opts"
    fi
    COMPREPLY=()
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(cut -d' ' -f1 <<<"$opts")" -- "$cur")
    fi
}

_llama8_prog()
{
    local p=$1
    printf '%s' "${p/#\~/$HOME}"
}

_llama8ctl()
{
    local prog cmd='' i cmds
    prog=$(_llama8_prog "$1")
    # The subcommand is the first word that is not an option.
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == -* ]] || { cmd=${COMP_WORDS[i]}; break; }
    done
    if [[ -z $cmd ]]; then
        cmds=$(_llama8_commands "$prog" | cut -d' ' -f1)
        if [[ ${COMP_WORDS[COMP_CWORD]} == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "--help --version" -- "${COMP_WORDS[COMP_CWORD]}")
        else
            mapfile -t COMPREPLY < <(compgen -W "$cmds" -- "${COMP_WORDS[COMP_CWORD]}")
        fi
        return
    fi
    _llama8_complete "$prog" "$cmd"
}

_llama8d()
{
    _llama8_complete "$(_llama8_prog "$1")"
}

complete -F _llama8ctl llama8ctl
complete -F _llama8d llama8d
