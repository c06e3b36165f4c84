#!/bin/bash
# test_nvim.sh LLAMA8D LLAMA8CTL LLAMA8-MKMODEL TOKENIZER NVIMDIR - the Neovim
# plugin against a real daemon (synthetic tiny model, real tokenizer), as
# test_vim.sh does the Vim one: its replies equal `llama8ctl generate`'s to
# the byte, in a scratch window and inserted below a range (while lines above
# it are added and deleted), two at once over the one pipe; a cancel, a
# refused request and a missing daemon each end in a message, with Neovim
# still running. Skipped (77) without Neovim 0.7 or later.
set -uo pipefail
daemon=$1 ctl=$2 mkmodel=$3 tokenizer=$4 nvimdir=$5
command -v nvim >/dev/null &&
    nvim --headless -u NONE -i NONE -c 'if !has("nvim-0.7") | cquit | endif' -c 'qa!' \
        </dev/null >/dev/null 2>&1 ||
    { echo "no Neovim 0.7 or later: skipped"; exit 77; }

# shellcheck source=tiny_daemon.sh
source "$(dirname "$0")/tiny_daemon.sh"
tiny_daemon nvim "$daemon" "$mkmodel" "$tokenizer"

editor_references "$ctl"

# The start of each test script: the plugin, talking to socket $1, and the
# helpers: the llama8 messages so far, waiting for n of them, a reply's lines.
preamble()
{
    cat <<LUA
vim.opt.runtimepath:prepend('$nvimdir')
vim.cmd('runtime plugin/llama8.lua')
vim.g.llama8_ctl = '$ctl'
vim.g.llama8_socket = '$1'
errors = {}
function check(cond, what) if not cond then table.insert(errors, what) end end
function messages() return vim.api.nvim_exec('messages', true) end
function count() local n = 0; for _ in messages():gmatch('llama8: ') do n = n + 1 end; return n end
function wait(n) check(vim.wait(30000, function() return count() >= n end, 10),
  'timed out waiting for ' .. n .. ' messages: ' .. messages()) end
function reply(id) return vim.api.nvim_buf_get_lines(vim.fn.bufnr('llama8://reply/' .. id), 0, -1, false) end
function lines_of(f) return vim.fn.readfile(f) end
function cat(...) local r = {}; for _, l in ipairs({...}) do vim.list_extend(r, l) end; return r end
function same(a, b, what) check(vim.deep_equal(a, b), what .. ': ' .. vim.inspect(a) .. ' vs ' .. vim.inspect(b)) end
LUA
}

{ preamble "$sock"; cat <<LUA; } >"$t/test.lua"
vim.g.llama8_request = { max_new = 24 }
local want = lines_of('$t/want.txt')

-- 1. A question, the reply in a scratch window; this window keeps the cursor.
local here = vim.fn.win_getid()
vim.cmd('Llama8 Say hi')
check(here == vim.fn.win_getid(), 'the cursor left its window')
wait(1)
same(reply(1), want, 'reply 1')
check(messages():find('llama8: length, 24 tokens', 1, true), 'no done message: ' .. messages())

-- 2. Two at once, over the one pipe.
vim.cmd('Llama8 Say hi')
vim.cmd('Llama8 Say hi')
wait(3)
same(reply(2), want, 'reply 2')
same(reply(3), want, 'reply 3')

-- 3. The lines of a range are the question; the reply goes below them.
vim.cmd('enew!')
vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'first', 'Say hi', 'last' })
vim.cmd('2Llama8!')
wait(4)
same(vim.api.nvim_buf_get_lines(0, 0, -1, false), cat({ 'first', 'Say hi' }, want, { 'last' }),
     'below the range')

-- 4. Lines added and deleted above a reply while it streams.
vim.g.llama8_request = { max_new = 200 }
vim.cmd('enew!')
vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'first', 'Say hi', 'last' })
vim.cmd('2Llama8!')
vim.wait(30000, function() return vim.fn.getline(3) ~= '' end, 1)
check(not messages():find('llama8: length, 200', 1, true), 'the reply ended before the edit')
vim.api.nvim_buf_set_lines(0, 0, 0, false, { 'new 1', 'new 2', 'new 3' })
vim.cmd('1delete')
wait(5)
same(vim.api.nvim_buf_get_lines(0, 0, -1, false),
     cat({ 'new 2', 'new 3', 'first', 'Say hi' }, lines_of('$t/want_long.txt'), { 'last' }),
     'edited above while streaming')

-- 5. Cancelled: a long reply stops, and says so.
vim.g.llama8_request = { max_new = 2000, ignore_eos = true }
vim.cmd('Llama8 Say hi')
vim.cmd('Llama8Cancel')
wait(6)
check(messages():find('llama8: cancelled', 1, true), 'no cancel message: ' .. messages())

-- 6. Refused by the pipe, and nothing to ask: messages, no reply.
vim.g.llama8_request = { max_new = 0 }
vim.cmd('Llama8 Say hi')
wait(7)
check(messages():find('llama8: BAD_PARAMS', 1, true), 'no BAD_PARAMS: ' .. messages())
same(reply(7), { '' }, 'refused reply')
vim.cmd('enew!')
vim.cmd('Llama8')
check(messages():find('nothing to ask', 1, true), 'no "nothing to ask"')

vim.fn.writefile(errors, '$t/errors.txt')
vim.fn.writefile({ 'finished' }, '$t/finished.txt')
vim.cmd('qa!')
LUA

# A copy of llama8ctl away from the build's library.
mkdir "$t/nolib" && cp "$ctl" "$t/nolib/llama8ctl"
{ preamble "$t/nobody.sock"; cat <<LUA; } >"$t/nodaemon.lua"
vim.cmd('Llama8 Say hi')
vim.wait(10000, function() return messages():find('exited', 1, true) ~= nil end, 10)
check(messages():find('llama8: .*nobody.sock'), 'no socket message: ' .. messages())
check(messages():find('llama8: llama8ctl pipe exited (status 3) with 1 request(s) open', 1, true),
      'no exit message: ' .. messages())
-- A llama8ctl that cannot load its library: the status and what it means.
vim.g.llama8_ctl = '$t/nolib/llama8ctl'
vim.env.LD_LIBRARY_PATH = nil
vim.cmd('messages clear')
vim.cmd('Llama8 Say hi')
vim.wait(10000, function() return messages():find('exited', 1, true) ~= nil end, 10)
check(messages():find('llama8: llama8ctl pipe exited (status 127) with 1 request(s) open: ' ..
                      'llama8ctl not found or cannot load libllama8client', 1, true),
      'no 127 message: ' .. messages())
vim.fn.writefile(errors, '$t/errors2.txt')
vim.cmd('qa!')
LUA

fail=0
timeout 120 nvim --headless -u NONE -i NONE -n -c "luafile $t/test.lua" </dev/null >"$t/nvim.log" 2>&1
if [ ! -f "$t/finished.txt" ]; then
    echo "FAIL: nvim did not finish the test script"; cat "$t/nvim.log"; fail=1
elif [ -s "$t/errors.txt" ]; then
    echo "FAIL:"; cat "$t/errors.txt"; fail=1
fi
timeout 60 nvim --headless -u NONE -i NONE -n -c "luafile $t/nodaemon.lua" </dev/null >"$t/nvim2.log" 2>&1
if [ ! -f "$t/errors2.txt" ]; then
    echo "FAIL: nvim did not finish the no-daemon script"; cat "$t/nvim2.log"; fail=1
elif [ -s "$t/errors2.txt" ]; then
    echo "FAIL (no daemon):"; cat "$t/errors2.txt"; fail=1
fi
[ $fail = 0 ] && echo "ok: replies equal llama8ctl generate's ($(wc -c <"$t/want.txt") bytes), cancel, refusal, no daemon"
exit $fail
