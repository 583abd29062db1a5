-- Pipelines (after, inputs, params_from): arm a follower, release or cancel the followers of
-- an upstream that ended, re-arm the followers a requeued upstream had cancelled. Spliced in
-- (--@@RELEASE@@) by every script that records an upstream's end, so the end and its release
-- are one atomic step: no process sits between them to die, and no second copy of a release
-- can push: a follower leaves 'waiting' once (docs/exactly-once.md).
-- An upstream or a follower is a member, 'job:<id>' or 'search:<id>' (state/pipeline.py):
--   <root>followers:<member>  set: its followers (kept after release: a requeue re-arms them)
--   <root>waits:<member>      set: a follower's upstreams not yet succeeded
--   <root>releasing:<member>  set: followers of an upstream that succeeded, still to look at
--   <root>releases            zset: upstream members with a releasing set, by when they ended
-- A release looks at PIPE_SLICE followers in the end's own script; the rest go in its
-- releasing set, in that same step, and release_rest.lua takes them a slice per call: the
-- worker that recorded the end right away, the reaper after a crash. So a fan-out of
-- thousands holds Redis a slice at a time, its first followers queue in milliseconds, and
-- a follower is still released once: a slice is one atomic step that releases only what
-- is 'waiting', and takes its members out of the set as it does.
-- The key names come from the job prefix the including script has ('fleet:job:'); their
-- suffixes are core.constants' (tests/unit/test_pipeline_lua.py holds them equal).
--@@OWNED@@
local function pipe_keys(job_prefix)
  local root = string.sub(job_prefix, 1, #job_prefix - #'job:')
  return {job = job_prefix, search = root .. 'search:', followers = root .. 'followers:',
          waits = root .. 'waits:', releasing = root .. 'releasing:',
          releases = root .. 'releases', owner_lists = root .. 'owner-lists',
          fallback = root .. 'fallback', active = root .. 'searches:active'}
end

local function pipe_split(m)
  return string.match(m, '^(%a+):(.+)$')
end

-- the hash that holds a member's record: its job's, or its search's
local function pipe_hash(K, kind, id)
  if kind == 'search' then return K.search .. id end
  return K.job .. id
end

local function pipe_record(K, m)
  return pipe_hash(K, pipe_split(m))
end

-- what an upstream is for its followers: 'ok', 'pending', or how it ended ('failed',
-- 'cancelled'); then its name and its reason in one line
local function pipe_status(K, m)
  local kind = pipe_split(m)
  local rk = pipe_record(K, m)
  if kind == 'search' then
    local outcome, why, name = unpack(redis.call('HMGET', rk, 'outcome', 'outcome_reason', 'name'))
    if outcome == 'succeeded' then return 'ok', name or m, '' end
    if outcome then return outcome, name or m, why or '' end
    return 'pending', name or m, ''
  end
  local state, why, err, name = unpack(redis.call('HMGET', rk, 'state', 'end_reason', 'last_error', 'name'))
  if state == 'succeeded' or state == 'pruned' then return 'ok', name or m, '' end
  if state == 'failed' or state == 'cancelled' then
    if not why or why == '' then why = string.match(err or '', '[^\n]*') end
    return state, name or m, why or ''
  end
  return 'pending', name or m, ''
end

-- a search's best trial: its job id and its values, or nil when none succeeded
local function pipe_best(K, sid)
  local sk = K.search .. sid
  local best = redis.call('HGET', sk, 'best_trial')
  if not best then return nil end
  return unpack(redis.call('HMGET', sk .. ':trial:' .. best, 'job_id', 'params'))
end

-- inputs and params_from resolved, as the released follower's record keeps them
local function pipe_resolve(K, rk, inputs, sid)
  if inputs and inputs ~= '' then
    local out = {}
    for _, i in ipairs(cjson.decode(inputs)) do
      local jid = i.id
      if i.kind == 'search' then jid = pipe_best(K, i.id) end
      if jid then table.insert(out, {dir = i.dir, job_id = jid}) end
    end
    if #out > 0 then redis.call('HSET', rk, 'input_jobs', cjson.encode(out)) end
  end
  if sid and sid ~= '' then
    local _, params = pipe_best(K, sid)
    if params then redis.call('HSET', rk, 'params', params) end
  end
end

-- what a release pushes, gathered while its followers are released and pushed at its end
-- (pipe_push): one LPUSH of many messages per list and one ZADD of every fallback deadline
-- cost a fraction of a command per follower, and the script is one atomic step either way
local function pipe_batch()
  return {lists = {}, msgs = {}, fallback = {}}
end

local function pipe_push(K, batch)
  for _, key in ipairs(batch.lists) do owned_push_many('LPUSH', key, batch.msgs[key], K.owner_lists) end
  owned_many('ZADD', K.fallback, batch.fallback)
end

-- what a release reads of a follower's record, in one HMGET (pipe_read); after_n is how
-- many upstreams it was armed with (pipe_arm)
local PIPE_READ = {'state', 'inputs', 'params_from', 'msg', 'cur_key', 'fb_grace_s', 'pushes',
                   'after_n'}

local function pipe_read(rk)
  return redis.call('HMGET', rk, unpack(PIPE_READ))
end

-- queue a waiting follower: its stored message, tagged as publish.lua tags it, into batch
-- (pipe_push pushes it). f is its record as pipe_read read it. One read and one write of its
-- record: a fan-out releases a thousand followers in one script.
local function pipe_release(K, fm, by, now, batch, f)
  local kind, id = pipe_split(fm)
  local rk = pipe_hash(K, kind, id)
  local state, inputs, sid, msg, key, grace, pushes = unpack(f)
  if state ~= 'waiting' then return false end
  pipe_resolve(K, rk, inputs, sid)
  if kind == 'search' then   -- the workers' sweep issues its trials
    redis.call('HDEL', rk, 'state')
    redis.call('HSET', rk, 'released_at', now, 'released_by', by)
    redis.call('SADD', K.active, id)
    return true
  end
  local n = (tonumber(pushes) or 0) + 1
  redis.call('HSET', rk, 'state', 'queued', 'queued_at', now, 'released_at', now, 'released_by', by,
             'pushes', n)
  local i, j = string.find(msg, '@@FLEET-TAG@@', 1, true)
  if i then msg = string.sub(msg, 1, i - 1) .. id .. '.' .. n .. string.sub(msg, j + 1) end
  local msgs = batch.msgs[key]
  if not msgs then
    msgs = {}
    batch.msgs[key] = msgs
    table.insert(batch.lists, key)
  end
  msgs[#msgs + 1] = msg
  if grace then
    table.insert(batch.fallback, tonumber(now) + tonumber(grace))
    table.insert(batch.fallback, id)
  end
  return true
end

-- cancel a waiting follower because upstream um ended with state and why; true if it did
local function pipe_cancel(K, fm, um, state, name, why, now)
  local kind = pipe_split(fm)
  local rk = pipe_record(K, fm)
  if redis.call('HGET', rk, 'state') ~= 'waiting' then return false end
  local ukind, uid = pipe_split(um)
  local text = 'upstream ' .. name .. (state == 'cancelled' and ' was cancelled' or ' failed')
  if why ~= '' then text = text .. ': ' .. why end
  local by = cjson.encode({kind = ukind, id = uid, name = name, state = state, reason = why})
  if kind == 'search' then
    redis.call('HSET', rk, 'state', 'cancelled', 'outcome', 'cancelled', 'outcome_reason', text,
               'cancelled_by', by)
  else
    redis.call('HSET', rk, 'state', 'cancelled', 'finished_at', now, 'last_error', text,
               'end', 'cancelled', 'end_reason', text, 'end_detail', '', 'cancelled_by', by)
  end
  return true
end

-- walk the followers of um, breadth first: step(m, fm) for each follower fm of m, and fm's
-- own followers next when step says so (each member's followers at most once: a cycle, which
-- publish refuses, could not loop)
local function pipe_walk(K, um, step)
  local queue, i, seen = {um}, 1, {[um] = true}
  while i <= #queue do
    local m = queue[i]
    i = i + 1
    for _, fm in ipairs(redis.call('SMEMBERS', K.followers .. m)) do
      if step(m, fm) and not seen[fm] then
        seen[fm] = true
        table.insert(queue, fm)
      end
    end
  end
end

-- every waiting follower after um, transitively, cancelled: each names its direct upstream
local function pipe_cascade(K, um, now)
  pipe_walk(K, um, function(m, fm)
    local state, name, why = pipe_status(K, m)
    return pipe_cancel(K, fm, m, state, name, why, now)
  end)
end

local PIPE_SLICE = 100   -- followers looked at per script: the end's own, then release_rest's
local pipe_more = false -- set when an end left followers in a releasing set (the script may say so)

-- follower fm of um, which succeeded: um off its waits, and released into batch when that
-- was its last upstream; false when it was not (or was no longer) waiting
local function pipe_follow(K, um, fm, now, batch)
  local f = pipe_read(pipe_record(K, fm))
  if f[1] ~= 'waiting' then return false end  -- released or cancelled before: waits kept as is
  local wk = K.waits .. fm
  if f[8] == '1' then       -- um is its one upstream: its waits go at once (a fan-out's
    redis.call('DEL', wk)   -- followers cost one call less each)
  else
    redis.call('SREM', wk, um)
    if redis.call('SCARD', wk) > 0 then return false end
  end
  return pipe_release(K, fm, um, now, batch, f)
end

-- the followers fms of um looked at and their messages pushed; how many were released
local function pipe_follow_all(K, um, fms, now)
  local batch, n = pipe_batch(), 0
  for _, fm in ipairs(fms) do
    if pipe_follow(K, um, fm, now, batch) then n = n + 1 end
  end
  pipe_push(K, batch)
  return n
end

-- upstream um has just ended (ok: succeeded); its followers released (the first PIPE_SLICE
-- now, the rest left in its releasing set) or cancelled
local function pipe_ended(K, um, ok, now)
  local fk = K.followers .. um
  if redis.call('EXISTS', fk) == 0 then return end   -- most jobs: no follower, one lookup
  if not ok then return pipe_cascade(K, um, now) end
  local fms = redis.call('SMEMBERS', fk)
  if #fms <= PIPE_SLICE then return pipe_follow_all(K, um, fms, now) end
  local rest = {}
  for i = PIPE_SLICE + 1, #fms do
    rest[#rest + 1] = fms[i]
    fms[i] = nil
  end
  owned_many('SADD', K.releasing .. um, rest)
  redis.call('ZADD', K.releases, 'NX', now, um)
  pipe_more = true
  return pipe_follow_all(K, um, fms, now)
end

-- one slice of the oldest release left (or of um's, when given): {released, left, um}
local function pipe_release_rest(K, um, now)
  if not um or um == '' then um = redis.call('ZRANGE', K.releases, 0, 0)[1] end
  if not um then return {0, 0, ''} end
  local rk = K.releasing .. um
  local n = pipe_follow_all(K, um, redis.call('SPOP', rk, PIPE_SLICE), now)
  local left = redis.call('SCARD', rk)
  if left == 0 then redis.call('ZREM', K.releases, um) end
  return {n, left, um}
end

-- job_key's job has just been put in state (a terminal one): its followers released or cancelled
local function pipe_job_ended(job_key, state, now)
  local K = pipe_keys(string.match(job_key, '^(.*:)'))
  pipe_ended(K, 'job:' .. string.sub(job_key, #K.job + 1), state == 'succeeded' or state == 'pruned', now)
end

-- put follower fm in 'waiting' on its upstreams ('after': JSON [{kind, id, name}]): waits
-- on those still to succeed, released at once when none is, cancelled when one failed
local function pipe_arm(K, fm, now)
  local rk = pipe_record(K, fm)
  local wk = K.waits .. fm
  redis.call('DEL', wk)
  local failed = nil
  local after = cjson.decode(redis.call('HGET', rk, 'after'))
  for _, u in ipairs(after) do
    local um = u.kind .. ':' .. u.id
    redis.call('SADD', K.followers .. um, fm)
    local state = pipe_status(K, um)
    if state == 'pending' then redis.call('SADD', wk, um)
    elseif state ~= 'ok' and not failed then failed = um end
  end
  redis.call('HSET', rk, 'state', 'waiting', 'after_n', #after)
  if failed then
    local state, name, why = pipe_status(K, failed)
    pipe_cancel(K, fm, failed, state, name, why, now)
    pipe_cascade(K, fm, now)
    return 'cancelled'
  end
  if redis.call('SCARD', wk) == 0 then
    local batch = pipe_batch()
    pipe_release(K, fm, '', now, batch, pipe_read(rk))
    pipe_push(K, batch)
    return 'released'
  end
  return 'waiting'
end

-- upstream um runs again (requeue, --force): the followers it cancelled, transitively, wait again
local function pipe_rearm(K, um, now)
  pipe_walk(K, um, function(m, fm)
    local _, mid = pipe_split(m)
    local rk = pipe_record(K, fm)
    local ok, by = pcall(cjson.decode, redis.call('HGET', rk, 'cancelled_by') or '')
    if redis.call('HGET', rk, 'state') ~= 'cancelled' or not ok or type(by) ~= 'table' or by.id ~= mid then
      return false
    end
    redis.call('HDEL', rk, 'cancelled_by', 'finished_at', 'last_error', 'end', 'end_reason',
               'end_detail', 'outcome', 'outcome_reason', 'input_jobs', 'released_at', 'released_by')
    if pipe_split(fm) == 'job' then redis.call('HSET', rk, 'attempts', 0) end
    return pipe_arm(K, fm, now) ~= 'cancelled'
  end)
end
