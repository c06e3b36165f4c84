-- llama8.lua - ask llama8d from Neovim (0.7 or later), its reply streamed
-- into a buffer: the Vim plugin's commands (client/vim), in Lua.
--
-- One `llama8ctl pipe` job per Neovim (started at the first question, again
-- after it exits) carries every request, a JSON line each way (README,
-- "llama8ctl pipe"), so requests run side by side and Neovim never waits.
--
--   :Llama8 TEXT           ask TEXT (a user message); the reply streams into
--                          a new scratch window
--   :'<,'>Llama8 [TEXT]    ask the lines, then TEXT after a blank line
--   :[range]Llama8! [TEXT] the reply goes into this buffer, below the range
--                          (or the cursor's line)
--   :Llama8Cancel          cancel the requests still running; for a key:
--                          vim.keymap.set('n', '<C-c>', '<Cmd>Llama8Cancel<CR>')
--
--   vim.g.llama8_ctl       the llama8ctl program ('llama8ctl')
--   vim.g.llama8_socket    the daemon's socket (default: llama8ctl's)
--   vim.g.llama8_request   more fields for each request, as the pipe takes
--                          them: {max_new = 512, temperature = 0.7,
--                          system = 'Answer briefly.', stop_text = {...}}
if vim.g.loaded_llama8 or vim.fn.has('nvim-0.7') == 0 then
  return
end
vim.g.loaded_llama8 = 1

local api = vim.api
-- A reply's line carries an extmark, so lines added or deleted above it
-- while it streams do not make it land in the wrong place.
local ns = api.nvim_create_namespace('llama8')
local job = nil
local next_id = 1
local reqs = {}      -- open requests by id: {buf, row (0-based), mark, follow}
local partial = ''   -- stdout's unfinished line

local function error_msg(msg)
  api.nvim_echo({ { 'llama8: ' .. msg, 'ErrorMsg' } }, true, {})
end

-- The request's line now: where its mark is.
local function row_of(r)
  local p = api.nvim_buf_get_extmark_by_id(r.buf, ns, r.mark, {})
  return p[1] or r.row
end

-- Adds text at the request's line, which moves down with each newline.
local function put(r, text)
  if type(text) ~= 'string' or text == '' or not api.nvim_buf_is_valid(r.buf) then
    return
  end
  local row = row_of(r)
  local parts = vim.split(text, '\n', { plain = true })
  local cur = api.nvim_buf_get_lines(r.buf, row, row + 1, false)[1] or ''
  parts[1] = cur .. parts[1]
  api.nvim_buf_set_lines(r.buf, row, row + 1, false, parts)
  r.row = row + #parts - 1
  r.mark = api.nvim_buf_set_extmark(r.buf, ns, r.row, 0, { id = r.mark })
  if r.follow then
    local last = api.nvim_buf_line_count(r.buf)
    for _, w in ipairs(vim.fn.win_findbuf(r.buf)) do
      api.nvim_win_set_cursor(w, { last, #(api.nvim_buf_get_lines(r.buf, last - 1, last, false)[1]) })
    end
  end
end

local function close(id)
  local r = reqs[id]
  if r and api.nvim_buf_is_valid(r.buf) then
    api.nvim_buf_del_extmark(r.buf, ns, r.mark)
  end
  reqs[id] = nil
end

local function on_line(line)
  local ok, ev = pcall(vim.fn.json_decode, line)
  if not ok or type(ev) ~= 'table' then
    return
  end
  local id = type(ev.id) == 'number' and ev.id or nil
  local r = id and reqs[id]
  if ev.event == 'error' then
    error_msg(tostring(ev.error or '?') .. ': ' .. tostring(ev.message or ''))
    if r then
      close(id)
    end
  elseif r and ev.event == 'token' then
    put(r, ev.text)
  elseif r and ev.event == 'done' then
    put(r, ev.text)
    close(id)
    api.nvim_echo({ { string.format('llama8: %s, %d tokens', tostring(ev.reason or '?'),
                                    tonumber(ev.tokens) or 0) } }, true, {})
  end
end

local function start()
  if job then
    return true
  end
  local ctl = vim.g.llama8_ctl or 'llama8ctl'
  local cmd = { ctl, 'pipe' }
  if (vim.g.llama8_socket or '') ~= '' then
    vim.list_extend(cmd, { '--socket', vim.g.llama8_socket })
  end
  partial = ''
  local j = vim.fn.jobstart(cmd, {
    on_stdout = function(_, data)
      data[1] = partial .. data[1]
      partial = table.remove(data)
      for _, l in ipairs(data) do
        on_line(l)
      end
    end,
    on_stderr = function(_, data)
      for _, l in ipairs(data) do
        if l ~= '' then
          error_msg(l)
        end
      end
    end,
    on_exit = function(_, status)
      local n = vim.tbl_count(reqs)
      if n > 0 then
        error_msg(string.format('llama8ctl pipe exited (status %d) with %d request(s) open%s',
                                status, n, status == 127
                                  and ': llama8ctl not found or cannot load libllama8client' or ''))
      end
      for id in pairs(reqs) do
        close(id)
      end
      job = nil
    end,
  })
  if j <= 0 then
    error_msg('cannot run ' .. ctl)
    return false
  end
  job = j
  return true
end

local function ask(o)
  local prompt = o.args
  if o.range > 0 then
    local lines = table.concat(api.nvim_buf_get_lines(0, o.line1 - 1, o.line2, false), '\n')
    prompt = prompt == '' and lines or lines .. '\n\n' .. prompt
  end
  if not prompt:find('%S') then
    error_msg('nothing to ask: give TEXT, a range of lines, or both')
    return
  end
  if not start() then
    return
  end
  local id = next_id
  next_id = next_id + 1
  local r
  if o.bang then
    local at = o.range > 0 and o.line2 or api.nvim_win_get_cursor(0)[1]
    api.nvim_buf_set_lines(0, at, at, false, { '' })
    r = { buf = api.nvim_get_current_buf(), row = at, follow = false }
  else
    vim.cmd('new')
    vim.bo.buftype, vim.bo.bufhidden, vim.bo.swapfile = 'nofile', 'wipe', false
    api.nvim_buf_set_name(0, 'llama8://reply/' .. id)
    r = { buf = api.nvim_get_current_buf(), row = 0, follow = true }
    vim.cmd('wincmd p')
  end
  r.mark = api.nvim_buf_set_extmark(r.buf, ns, r.row, 0, {})
  reqs[id] = r
  local req = vim.tbl_extend('keep', { id = id, text = prompt }, vim.g.llama8_request or {})
  vim.fn.chansend(job, vim.fn.json_encode(req) .. '\n')
end

local function cancel()
  if not job then
    return
  end
  for id in pairs(reqs) do
    vim.fn.chansend(job, vim.fn.json_encode({ cancel = id }) .. '\n')
  end
end

api.nvim_create_user_command('Llama8', ask, { range = true, bang = true, nargs = '*' })
api.nvim_create_user_command('Llama8Cancel', cancel, { bar = true })
