" llama8.vim - ask llama8d from Vim, its reply streamed into a buffer.
"
" One `llama8ctl pipe` job per Vim (started at the first question, again
" after it exits) carries every request: a JSON line each way (README,
" "llama8ctl pipe"), so requests run side by side and Vim never waits.
"
"   :Llama8 TEXT           ask TEXT (a user message); the reply streams into
"                          a new scratch window
"   :'<,'>Llama8 [TEXT]    ask the lines, then TEXT after a blank line
"   :[range]Llama8! [TEXT] the reply goes into this buffer, below the range
"                          (or the cursor's line)
"   :Llama8Cancel          cancel the requests still running
"
"   g:llama8_ctl           the llama8ctl program ('llama8ctl')
"   g:llama8_socket        the daemon's socket (default: llama8ctl's)
"   g:llama8_request       more fields for each request, as the pipe takes
"                          them: {'max_new': 512, 'temperature': 0.7,
"                          'system': 'Answer briefly.', 'stop_text': [...]}
"
" Needs +job and +channel, and Vim 8.1.1418 or later (win_execute).
if exists('g:loaded_llama8') || !has('job') || !has('channel') || !exists('*win_execute')
  finish
endif
let g:loaded_llama8 = 1

let s:job = v:null
let s:next_id = 1
" Open requests by id: the buffer and line their reply goes to.
let s:reqs = {}
" With text properties, a reply's line carries an invisible mark, so that
" lines added or deleted above it while it streams do not make it land in
" the wrong place (setbufline() drops a line's marks: each write sets it
" again). Without them the line number is kept as it was.
let s:marks = has('textprop') && exists('*prop_find')
if s:marks && empty(prop_type_get('llama8_reply'))
  call prop_type_add('llama8_reply', {})
endif

function! s:error(msg) abort
  echohl ErrorMsg
  echomsg 'llama8: ' . a:msg
  echohl None
endfunction

function! s:running() abort
  return s:job isnot v:null && job_status(s:job) ==# 'run'
endfunction

function! s:start() abort
  if s:running()
    return 1
  endif
  let cmd = [get(g:, 'llama8_ctl', 'llama8ctl'), 'pipe']
  if get(g:, 'llama8_socket', '') !=# ''
    let cmd += ['--socket', g:llama8_socket]
  endif
  let s:job = job_start(cmd, {'mode': 'nl', 'noblock': 1,
        \ 'out_cb': function('s:on_line'), 'err_cb': function('s:on_stderr'),
        \ 'exit_cb': function('s:on_exit')})
  if job_status(s:job) !=# 'run'
    call s:error('cannot run ' . cmd[0])
    let s:job = v:null
    return 0
  endif
  return 1
endfunction

" The request's line now: where its mark is, else (its line was deleted)
" the same number, or the end of a buffer that has become shorter.
function! s:find(r) abort
  if !s:marks
    return
  endif
  let n = get(getbufinfo(a:r.buf)[0], 'linecount', a:r.lnum)
  let q = {'bufnr': a:r.buf, 'type': 'llama8_reply', 'id': a:r.id,
        \ 'lnum': min([a:r.lnum, n]), 'col': 1}
  let p = prop_find(q, 'f')
  if empty(p)
    let p = prop_find(q, 'b')
  endif
  let a:r.lnum = empty(p) ? min([a:r.lnum, n + 1]) : p.lnum
endfunction

function! s:mark(r, on) abort
  if !s:marks || !bufexists(a:r.buf)
    return
  endif
  if a:on
    call prop_add(a:r.lnum, 1, {'type': 'llama8_reply', 'id': a:r.id, 'bufnr': a:r.buf})
  else
    call prop_remove({'type': 'llama8_reply', 'id': a:r.id, 'bufnr': a:r.buf, 'all': 1})
  endif
endfunction

" Adds text at the request's line, which moves down with each newline.
function! s:put(r, text) abort
  if a:text ==# '' || !bufexists(a:r.buf)
    return
  endif
  call s:find(a:r)
  let parts = split(a:text, "\n", 1)
  let cur = get(getbufline(a:r.buf, a:r.lnum), 0, '')
  call setbufline(a:r.buf, a:r.lnum, cur . parts[0])
  for p in parts[1:]
    call appendbufline(a:r.buf, a:r.lnum, p)
    let a:r.lnum += 1
  endfor
  call s:mark(a:r, 1)
  if a:r.follow
    for w in win_findbuf(a:r.buf)
      call win_execute(w, 'call cursor(line("$"), col([line("$"), "$"]))')
    endfor
  endif
endfunction

function! s:on_line(ch, line) abort
  try
    let ev = json_decode(a:line)
  catch
    return
  endtry
  if type(ev) != v:t_dict
    return
  endif
  let kind = get(ev, 'event', '')
  let id = get(ev, 'id', v:null)
  let key = type(id) == v:t_number ? string(id) : ''
  let r = get(s:reqs, key, v:null)
  if kind ==# 'error'
    call s:error(get(ev, 'error', '?') . ': ' . get(ev, 'message', ''))
    if r isnot v:null
      call s:mark(r, 0)
      call remove(s:reqs, key)
    endif
    return
  endif
  if r is v:null
    return
  endif
  if kind ==# 'token'
    call s:put(r, get(ev, 'text', ''))
  elseif kind ==# 'done'
    call s:put(r, get(ev, 'text', ''))
    call s:mark(r, 0)
    call remove(s:reqs, key)
    echomsg printf('llama8: %s, %d tokens', get(ev, 'reason', '?'), get(ev, 'tokens', 0))
  endif
endfunction

function! s:on_stderr(ch, line) abort
  call s:error(a:line)
endfunction

function! s:on_exit(job, status) abort
  if !empty(s:reqs)
    call s:error(printf('llama8ctl pipe exited (status %d) with %d request(s) open%s',
          \ a:status, len(s:reqs), a:status == 127
          \ ? ': llama8ctl not found or cannot load libllama8client' : ''))
  endif
  for r in values(s:reqs)
    call s:mark(r, 0)
  endfor
  let s:reqs = {}
  let s:job = v:null
endfunction

function! s:ask(nrange, line1, line2, bang, text) abort
  let prompt = a:text
  if a:nrange > 0
    let lines = join(getline(a:line1, a:line2), "\n")
    let prompt = a:text ==# '' ? lines : lines . "\n\n" . a:text
  endif
  if prompt =~# '^\_s*$'
    call s:error('nothing to ask: give TEXT, a range of lines, or both')
    return
  endif
  if !s:start()
    return
  endif
  let id = s:next_id
  let s:next_id += 1
  if a:bang
    let at = a:nrange > 0 ? a:line2 : line('.')
    call append(at, '')
    let r = {'id': id, 'buf': bufnr(''), 'lnum': at + 1, 'follow': 0}
  else
    new
    setlocal buftype=nofile bufhidden=wipe noswapfile
    silent execute 'file' fnameescape('llama8://reply/' . id)
    let r = {'id': id, 'buf': bufnr(''), 'lnum': 1, 'follow': 1}
    wincmd p
  endif
  call s:mark(r, 1)
  let req = extend({'id': id, 'text': prompt}, get(g:, 'llama8_request', {}), 'keep')
  let s:reqs[string(id)] = r
  call ch_sendraw(s:job, json_encode(req) . "\n")
endfunction

function! s:cancel() abort
  if !s:running()
    return
  endif
  for key in keys(s:reqs)
    call ch_sendraw(s:job, json_encode({'cancel': str2nr(key)}) . "\n")
  endfor
endfunction

command! -range -bang -nargs=* Llama8 call s:ask(<range>, <line1>, <line2>, <bang>0, <q-args>)
command! -bar Llama8Cancel call s:cancel()
