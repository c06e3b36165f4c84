#!/bin/bash
# test_vim.sh LLAMA8D LLAMA8CTL LLAMA8-MKMODEL TOKENIZER VIMDIR - the Vim
# plugin against a real daemon (synthetic tiny model, real tokenizer): its
# replies equal `llama8ctl generate`'s to the byte, in a scratch window and
# inserted below a range (while lines above it are added and deleted), two
# at once over the one pipe; a cancel, a refused
# request and a missing daemon each end in a message, with Vim still running.
# Skipped (77) without a Vim the plugin runs on (+job, +channel, win_execute).
set -uo pipefail
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4 vimdir=$5
vim -Nu NONE -i NONE -es -c 'if !has("job") || !has("channel") || !exists("*win_execute") | cquit | endif' \
    -c 'qa!' </dev/null >/dev/null 2>&1 ||
    { echo "no vim with +job, +channel and win_execute: skipped"; exit 77; }

# shellcheck source=tiny_daemon.sh
source "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon vim "$daemon" "$mkmodel" "$tokenizer"

editor_references "$ctl"

# The start of each Vim script: the plugin, talking to socket $1.
preamble()
{
    cat <<EOF
set nocompatible encoding=utf-8
let &rtp = '$vimdir,' . &rtp
runtime plugin/llama8.vim
let g:llama8_ctl = '$ctl'
let g:llama8_socket = '$1'
EOF
}

{ preamble "$sock"; cat <<EOF; } >"$t/test.vim"
let g:llama8_request = {'max_new': 24}
let want = readfile('$t/want.txt')

" Waits until n replies have ended (each ends with a message).
function! Wait(n) abort
  let t0 = reltime()
  while reltimefloat(reltime(t0)) < 30
    if len(filter(split(execute('messages'), "\n"), 'v:val =~# "^llama8: "')) >= a:n
      return
    endif
    sleep 10m
  endwhile
  call assert_report('timed out waiting for ' . a:n . ' messages: ' . execute('messages'))
endfunction
function! Reply(id) abort
  return getbufline(bufnr('llama8://reply/' . a:id), 1, '$')
endfunction

" 1. A question, the reply in a scratch window; this window keeps the cursor.
let here = win_getid()
Llama8 Say hi
call assert_equal(here, win_getid())
call Wait(1)
call assert_equal(want, Reply(1))
call assert_match('llama8: length, 24 tokens', execute('messages'))

" 2. Two at once, over the one pipe.
Llama8 Say hi
Llama8 Say hi
call Wait(3)
call assert_equal(want, Reply(2))
call assert_equal(want, Reply(3))

" 3. The lines of a range are the question; the reply goes below them.
enew!
call setline(1, ['first', 'Say hi', 'last'])
2Llama8!
call Wait(4)
call assert_equal(['first', 'Say hi'] + want + ['last'], getline(1, '$'))

" 4. Lines added and deleted above a reply while it streams: the rest of
" it still goes below its range.
let g:llama8_request = {'max_new': 200}
enew!
call setline(1, ['first', 'Say hi', 'last'])
2Llama8!
let t0 = reltime()
while getline(3) ==# '' && reltimefloat(reltime(t0)) < 30
  sleep 1m
endwhile
call assert_notmatch('llama8: length, 200', execute('messages'), 'the reply ended before the edit')
call append(0, ['new 1', 'new 2', 'new 3'])
1delete
call Wait(5)
call assert_equal(['new 2', 'new 3', 'first', 'Say hi'] + readfile('$t/want_long.txt') + ['last'],
      \ getline(1, '$'))

" 5. Cancelled: a long reply stops, and says so.
let g:llama8_request = {'max_new': 2000, 'ignore_eos': v:true}
Llama8 Say hi
Llama8Cancel
call Wait(6)
call assert_match('llama8: cancelled', execute('messages'))

" 6. Refused by the pipe, and nothing to ask: messages, no reply.
let g:llama8_request = {'max_new': 0}
Llama8 Say hi
call Wait(7)
call assert_match('llama8: BAD_PARAMS', execute('messages'))
call assert_equal([''], Reply(7))
enew!
Llama8
call assert_match('nothing to ask', execute('messages'))

call writefile(v:errors, '$t/errors.txt')
call writefile(['finished'], '$t/finished.txt')
qa!
EOF

# A copy of llama8ctl away from the build's library.
mkdir "$t/nolib" && cp "$ctl" "$t/nolib/llama8ctl"
{ preamble "$t/nobody.sock"; cat <<EOF; } >"$t/nodaemon.vim"
Llama8 Say hi
let t0 = reltime()
while reltimefloat(reltime(t0)) < 10 && execute('messages') !~# 'exited'
  sleep 10m
endwhile
call assert_match('llama8: .*nobody.sock', execute('messages'))
call assert_match('llama8: llama8ctl pipe exited (status 3) with 1 request(s) open', execute('messages'))
" A llama8ctl that cannot load its library: the status and what it means.
let g:llama8_ctl = '$t/nolib/llama8ctl'
let \$LD_LIBRARY_PATH = ''
messages clear
Llama8 Say hi
let t0 = reltime()
while reltimefloat(reltime(t0)) < 10 && execute('messages') !~# 'exited'
  sleep 10m
endwhile
call assert_match('llama8: llama8ctl pipe exited (status 127) with 1 request(s) open: llama8ctl not found or cannot load libllama8client', execute('messages'))
call writefile(v:errors, '$t/errors2.txt')
qa!
EOF

fail=0
timeout 120 vim -Nu NONE -i NONE -n -es -S "$t/test.vim" </dev/null >"$t/vim.log" 2>&1
if [ ! -f "$t/finished.txt" ]; then
    echo "FAIL: vim did not finish the test script"; cat "$t/vim.log"; fail=1
elif [ -s "$t/errors.txt" ]; then
    echo "FAIL:"; cat "$t/errors.txt"; fail=1
fi
timeout 60 vim -Nu NONE -i NONE -n -es -S "$t/nodaemon.vim" </dev/null >"$t/vim2.log" 2>&1
if [ ! -f "$t/errors2.txt" ]; then
    echo "FAIL: vim did not finish the no-daemon script"; cat "$t/vim2.log"; fail=1
elif [ -s "$t/errors2.txt" ]; then
    echo "FAIL (no daemon):"; cat "$t/errors2.txt"; fail=1
fi
[ $fail = 0 ] && echo "ok: replies equal llama8ctl generate's ($(wc -c <"$t/want.txt") bytes), cancel, refusal, no daemon"
exit $fail
