-- Shared by the scripts that push a job's message or end its run (spliced in at load time
-- where a script has the line --@@OWNED@@; see state/scripts.py).

-- A list that belongs to an owner ('<queue>\6\23<owner>\6\22<pri>') is registered in the
-- owner-lists set once pushed to, so workers know to ask for it (tasks/transport.py).
local function owned_list(key, owner_lists)
  local member = string.match(key, '^(.-\6\23.+)\6\22%d+$')
  if member then redis.call('SADD', owner_lists, member) end
end

-- Push a message, its list registered if an owner's.
local function owned_push(cmd, key, msg, owner_lists)
  redis.call(cmd, key, msg)
  owned_list(key, owner_lists)
end

-- Call cmd on key with many values, OWNED_CHUNK of them per command: each value is a Lua
-- stack slot for unpack and an argument of redis.call, and both are bounded. Even, so a
-- chunk of ZADD's score/member pairs splits no pair.
local OWNED_CHUNK = 500
local function owned_many(cmd, key, values)
  for i = 1, #values, OWNED_CHUNK do
    redis.call(cmd, key, unpack(values, i, math.min(i + OWNED_CHUNK - 1, #values)))
  end
end

-- Push many messages to one list, in order: it ends as owned_push of each in turn leaves it
-- (LPUSH k a b == LPUSH k a; LPUSH k b), at a fraction of the cost of one command each.
local function owned_push_many(cmd, key, msgs, owner_lists)
  if #msgs == 0 then return end
  owned_many(cmd, key, msgs)
  owned_list(key, owner_lists)
end

-- Charge a run's owner with the GPU- and core-seconds it held since it was last charged (or
-- since started_at) up to upto, into a usage decayed with a half-life ('gpu_s core_s at' per
-- owner in usage_key). The record remembers how far its run was charged ('charged': token
-- and time), so a running job charged now and then, then at its end, counts each second once.
-- A gang's record holds one member's resources ('gpu', 'cores': each member holds the same
-- per-host needs) and every member's host ('gang_hosts'): its run is charged for all of them.
local function charge_run(jk, usage_key, token, upto, now, half_life)
  if not token then return 0 end
  local started = tonumber(redis.call('HGET', jk, 'started_at') or '')
  local owner = redis.call('HGET', jk, 'owner')
  if not started or not owner or owner == '' then return 0 end
  local from = started
  local was, at = string.match(redis.call('HGET', jk, 'charged') or '', '^(.*) (%S+)$')
  if was == token then from = math.max(from, tonumber(at) or from) end
  if upto <= from then return 0 end
  redis.call('HSET', jk, 'charged', token .. ' ' .. string.format('%.17g', upto))
  local held = upto - from
  local gpus = 0
  for _ in string.gmatch(redis.call('HGET', jk, 'gpu') or '', '[^,]+') do gpus = gpus + 1 end
  local cores = tonumber(redis.call('HGET', jk, 'cores') or '0') or 0
  local members = 0
  for _ in string.gmatch(redis.call('HGET', jk, 'gang_hosts') or '', '[^,]+') do
    members = members + 1
  end
  gpus, cores = gpus * math.max(1, members), cores * math.max(1, members)
  local g, c, last = 0, 0, now
  local old = redis.call('HGET', usage_key, owner)
  if old then
    local og, oc, oat = string.match(old, '^(%S+) (%S+) (%S+)$')
    og, oc, oat = tonumber(og) or 0, tonumber(oc) or 0, tonumber(oat) or now
    local f = 1
    if now > oat then f = math.pow(0.5, (now - oat) / half_life) end
    g, c, last = og * f, oc * f, math.max(now, oat)
  end
  g, c = g + gpus * held, c + cores * held
  redis.call('HSET', usage_key, owner, string.format('%.17g %.17g %.17g', g, c, last))
  -- the job's own totals over all its runs, undecayed (`fleet usage`: a record keeps only
  -- its latest run's times, and a preempted or retried job ran before)
  if gpus > 0 then redis.call('HINCRBYFLOAT', jk, 'gpu_s', gpus * held) end
  if cores > 0 then redis.call('HINCRBYFLOAT', jk, 'core_s', cores * held) end
  return held
end
