-- Return jobs whose lease expired to their queue (or fail them after max attempts),
-- and move prefer_cuda jobs whose grace ended to their CPU fallback queue.
-- KEYS: running_set, fallback_zset, owner_lists, usage_hash
-- ARGV: now, default_max_attempts, job_prefix, lease_prefix, fairshare_half_life_s,
--       then job_id/token pairs of runs known dead, if any
-- Runs known dead: their worker process is gone, proved on its own host by the run folder's
-- lock being free (tasks/workdirs.py, tasks/watchman.py). Their leases end now instead of
-- after their TTL, and only those runs are looked at. A pair whose token no longer owns the
-- job is left alone: that run was already superseded, and a live run never has its lease
-- ended here (its folder stays locked while its worker lives).
-- A lost run is charged to its owner up to its last heartbeat (lua/owned.lua).
--@@RELEASE@@
-- a run whose trainer exited 0 keeps its job for trained_grace_s after its last heartbeat
-- (trained.lua): its host, restarted, uploads the output instead of a second training
local function trained_held(jk, now)
  local grace = redis.call('HGET', jk, 'trained_grace_s')
  return grace and now < tonumber(redis.call('HGET', jk, 'heartbeat_at') or '0') + tonumber(grace)
end
-- the run ended lost: its record says so (last_error, and the end fields state/jobrecord.py reads)
local function lost(jk, state, why)
  redis.call('HSET', jk, 'state', state, 'last_error', why,
             'end', 'lost', 'end_reason', why, 'end_detail', '')
end
local out = {}
local dead = #ARGV > 5
local ids = {}
if dead then
  for i = 6, #ARGV, 2 do
    local jk, lk = ARGV[3] .. ARGV[i], ARGV[4] .. ARGV[i]
    local holder = redis.call('GET', lk)
    if redis.call('HGET', jk, 'state') == 'running' and redis.call('HGET', jk, 'token') == ARGV[i + 1]
       and (not holder or holder == ARGV[i + 1]) then
      redis.call('DEL', lk)
      table.insert(ids, ARGV[i])
    end
  end
else
  ids = redis.call('SMEMBERS', KEYS[1])
end
for _, id in ipairs(ids) do
  local jk = ARGV[3] .. id
  if redis.call('EXISTS', ARGV[4] .. id) == 0 and not trained_held(jk, tonumber(ARGV[1])) then
    redis.call('SREM', KEYS[1], id)
    if redis.call('HGET', jk, 'state') == 'running' then
      local attempts = tonumber(redis.call('HGET', jk, 'attempts') or '0')
      local max = tonumber(redis.call('HGET', jk, 'max_attempts') or ARGV[2])
      local who = redis.call('HGET', jk, 'worker') or '?'
      local gone = (dead and 'worker died on ' or 'lease expired on ') .. who
      charge_run(jk, KEYS[4], redis.call('HGET', jk, 'token'),
                 tonumber(redis.call('HGET', jk, 'heartbeat_at') or ARGV[1]), tonumber(ARGV[1]), tonumber(ARGV[5]))
      redis.call('HDEL', jk, 'token')
      if not redis.call('HGET', jk, 'pri_msg') then
        lost(jk, 'failed', gone .. '; cannot requeue: it was not sent by fleet publish')
        redis.call('HSET', jk, 'finished_at', ARGV[1])
        pipe_job_ended(jk, 'failed', ARGV[1])
        table.insert(out, id .. ' failed')
      elseif attempts >= max then
        lost(jk, 'failed', gone .. '; gave up after ' .. attempts
             .. ' attempt(s) (max_attempts=' .. max .. ')')
        redis.call('HSET', jk, 'finished_at', ARGV[1])
        pipe_job_ended(jk, 'failed', ARGV[1])
        table.insert(out, id .. ' failed')
      else
        lost(jk, 'queued', gone .. ' (attempt ' .. attempts .. ')')
        redis.call('HSET', jk, 'queued_at', ARGV[1],
                   'cur_key', redis.call('HGET', jk, 'pri_key'), 'msg', redis.call('HGET', jk, 'pri_msg'),
                   'queue', redis.call('HGET', jk, 'pri_queue'))
        redis.call('HDEL', jk, 'worker', 'gpu')
        local grace = redis.call('HGET', jk, 'fb_grace_s')
        if grace then redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(grace), id) end
        local n = redis.call('HINCRBY', jk, 'pushes', 1)
        owned_push('RPUSH', redis.call('HGET', jk, 'cur_key'),
                   (string.gsub(redis.call('HGET', jk, 'msg'), '@@FLEET%-TAG@@', id .. '.' .. n)), KEYS[3])
        table.insert(out, id .. ' requeued')
      end
    end
  end
end
if dead then return out end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])) do
  redis.call('ZREM', KEYS[2], id)
  local jk = ARGV[3] .. id
  local fb = redis.call('HGET', jk, 'fb_key')
  if fb and redis.call('HGET', jk, 'state') == 'queued' then
    local n = redis.call('HINCRBY', jk, 'pushes', 1)
    local msg = redis.call('HGET', jk, 'fb_msg')
    redis.call('HSET', jk, 'cur_key', fb, 'msg', msg, 'queue', redis.call('HGET', jk, 'fallback_queue'))
    owned_push('LPUSH', fb, (string.gsub(msg, '@@FLEET%-TAG@@', id .. '.' .. n)), KEYS[3])
    table.insert(out, id .. ' fell back')
  end
end
return out
