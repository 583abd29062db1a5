-- A gang (a job with nodes = N): N members on N distinct hosts start its one run together.
-- The gang hash holds who has joined while it forms; the job record stays the one record:
-- the member that completes the gang claims it (claim.lua) under the gang's token, which
-- every member then heartbeats (heartbeat.lua), so cancel and takeover reach all of them.
--
-- Copies of the job's message are seats: one is in its queue when it is published or
-- requeued; the first member to join pushes the others (to the front of the queue, so a
-- forming gang is next for the hosts that free up), and a member that leaves pushes its
-- own back (to the back, so the host serves the jobs queued before it first). 'out' counts
-- the copies in circulation so that no seat is lost; an extra copy is harmless (it finds the
-- gang full, or the job running, and is dropped).
--
-- Two gangs that each hold some of the hosts they both want would wait for each other: the
-- older one (higher priority, then published first) wins. Forming gangs of every queue are
-- listed in one forming zset by that order; a waiting member whose gang has an older gang
-- forming (holding at least one host, short of its N) before it, on a queue its host serves,
-- yields its seat at once, so its host can take the older gang's seat next. A gang of a
-- queue the host does not serve is no reason to yield: its seats never come to this host.
--
-- A running gang is stopped as a whole by 'halt' (a policy on one member's host: preemption,
-- a GPU yielded to its owner): every member's next beat answers 'halt' with the request, each
-- stops its process, and rank 0 syncs its checkpoint and puts the record back uncounted.
--
-- KEYS: job_key, gang_key, owner_lists, forming_zset
-- A beat's time is Redis's (TIME), never a host's: members' clocks may disagree by more than
-- the beat TTL, and a member ahead would find its partners' beats old and break the gang.
--
-- ARGV: op ('join' | 'beat' | 'leave' | 'done' | 'start' | 'halt'), beat_ttl_ms, then:
--   join:  nodes, host, member_json, priority -> {'wait'|'complete', rank} | {'drop', why}
--                                               | {'same_host', ''}
--   beat:  rank, seat, queues ('a,b': the queues its host serves; '' = its gang's own)
--                                            -> {'wait', alive} | {'formed', token}
--                                               | {'broken', 'rank R on HOST'} | {'gone', state}
--                                               | {'evicted', ''} | {'yield', older job_id}
--                                               | {'halt', request_json}
--   leave: rank, seat                        -> {'left', ''} | {'formed', token}
--   done:  rank, why                         -> {'ok', ''}  (why: '1', or 'pruned': its trial)
--   start: token                             -> {'ok', hosts} | {'stale', ''}
--   halt:  token, request_json               -> {'ok', ''} | {'stale', ''} (the first stands)
-- and after every op's own, always the last three (core.constants): hash_ttl_s (a gang hash
-- outlives its last join this long), max_priority, older_scan (forming gangs ahead of this
-- one a waiting member looks at). Last, not third: each op has its own number of ARGV.
--@@OWNED@@
local op, ttl = ARGV[1], tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local jk, gk = KEYS[1], KEYS[2]
local GANG_TTL_S, MAX_PRIORITY, OLDER_SCAN =
  tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])

local function push(cmd)
  local id = redis.call('HGET', jk, 'job_id')
  local k = redis.call('HINCRBY', jk, 'pushes', 1)
  owned_push(cmd, redis.call('HGET', jk, 'cur_key'),
             (string.gsub(redis.call('HGET', jk, 'msg'), '@@FLEET%-TAG@@', id .. '.' .. k)), KEYS[3])
  redis.call('HINCRBY', gk, 'out', 1)
end

-- Members whose beat is older than the TTL are gone (their worker died while waiting);
-- returns how many are alive, the first free rank, and whether ``host`` is among them.
local function census(host)
  local n = tonumber(redis.call('HGET', gk, 'n'))
  local alive, free, mine = 0, nil, false
  for r = 0, n - 1 do
    local m = redis.call('HGET', gk, 'm:' .. r)
    if m and tonumber(redis.call('HGET', gk, 'beat:' .. r) or '0') + ttl < now then
      redis.call('HDEL', gk, 'm:' .. r, 'beat:' .. r)
      m = nil
    end
    if m then
      alive = alive + 1
      if host and cjson.decode(m).host == host then mine = true end
    elseif not free then
      free = r
    end
  end
  return alive, free, mine, n
end

-- Keep as many copies in circulation as there are free seats (one while nobody waits).
local function top_up(alive, n)
  local want = n - alive
  if alive == 0 then want = 1 end
  local out = math.max(0, tonumber(redis.call('HGET', gk, 'out') or '0'))
  redis.call('HSET', gk, 'out', out)
  for _ = out + 1, want do push('RPUSH') end
end

local GANG_PREFIX = string.sub(gk, 1, #gk - #(redis.call('HGET', jk, 'job_id') or ''))
local JOB_PREFIX = string.sub(jk, 1, #jk - #(redis.call('HGET', jk, 'job_id') or ''))

-- Alive members of another gang's hash (read only: its own members prune it).
local function alive_in(other_gk, n)
  local alive = 0
  for r = 0, n - 1 do
    if redis.call('HEXISTS', other_gk, 'm:' .. r) == 1
       and tonumber(redis.call('HGET', other_gk, 'beat:' .. r) or '0') + ttl >= now then
      alive = alive + 1
    end
  end
  return alive
end

-- An older gang, forming and holding a host, on one of ``served`` (the queues this member's
-- host serves, 'a,b'; '' = this gang's own), that this one should yield to.
local function older(served)
  local id = redis.call('HGET', jk, 'job_id')
  local mine = redis.call('ZRANK', KEYS[4], id)  -- ties (one publish) go by job ID
  if not mine or mine == 0 then return nil end
  local queues = {}
  if served == nil or served == '' then served = redis.call('HGET', jk, 'pri_queue') or '' end
  for q in string.gmatch(served, '[^,]+') do queues[q] = true end
  for _, other in ipairs(redis.call('ZRANGE', KEYS[4], math.max(0, mine - OLDER_SCAN), mine - 1)) do
    local ojk, ogk = JOB_PREFIX .. other, GANG_PREFIX .. other
    local n = tonumber(redis.call('HGET', ogk, 'n') or '0')
    if redis.call('HGET', ojk, 'state') ~= 'queued' or n == 0 then
      redis.call('ZREM', KEYS[4], other)  -- started, ended or gone: no longer forming
    elseif queues[redis.call('HGET', ojk, 'pri_queue') or ''] then  -- its queue, any priority
      local alive = alive_in(ogk, n)
      if alive > 0 and alive < n then return other end
    end
  end
  return nil
end

local function formed()
  local token = redis.call('HGET', gk, 'token')
  return token and redis.call('HGET', jk, 'state') == 'running'
     and redis.call('HGET', jk, 'token') == token and token
end

if op == 'done' then
  redis.call('HSET', gk, 'done:' .. ARGV[3], ARGV[4])
  return {'ok', ''}
end

if op == 'halt' then
  if redis.call('HGET', jk, 'token') ~= ARGV[3] or redis.call('HGET', jk, 'state') ~= 'running' then
    return {'stale', ''}
  end
  redis.call('HSETNX', gk, 'halt', ARGV[4])
  return {'ok', ''}
end

if op == 'start' then
  if redis.call('HGET', jk, 'token') ~= ARGV[3] then return {'stale', ''} end
  redis.call('ZREM', KEYS[4], redis.call('HGET', jk, 'job_id'))
  local hosts = {}
  for r = 0, tonumber(redis.call('HGET', gk, 'n')) - 1 do
    hosts[#hosts + 1] = cjson.decode(redis.call('HGET', gk, 'm:' .. r) or '{"host":"?"}').host
  end
  local list = table.concat(hosts, ',')
  redis.call('HSET', jk, 'worker', hosts[1], 'gang_hosts', list)
  return {'ok', list}
end

if op == 'join' then
  local state = redis.call('HGET', jk, 'state')
  if state == 'running' then
    return {'drop', 'running on ' .. (redis.call('HGET', jk, 'worker') or '?')}
  end
  if state ~= 'queued' then return {'drop', state or 'no record'} end
  -- a gang hash from a formation whose run has started since belongs to the past
  local runs = redis.call('HGET', jk, 'runs') or '0'
  if redis.call('HGET', gk, 'runs') ~= runs then
    redis.call('DEL', gk)
    redis.call('HSET', gk, 'runs', runs, 'n', ARGV[3], 'out', 1)
  end
  redis.call('EXPIRE', gk, GANG_TTL_S)
  local alive, free, mine, n = census(ARGV[4])
  if mine then  -- one member per host: this copy is another host's seat
    redis.call('HINCRBY', gk, 'out', -1)
    push('LPUSH')
    return {'same_host', ''}
  end
  redis.call('HINCRBY', gk, 'out', -1)
  if not free then return {'drop', 'gang full'} end
  redis.call('HSET', gk, 'm:' .. free, ARGV[5], 'beat:' .. free, now)
  if alive == 0 then redis.call('HSET', gk, 'since', now) end
  -- its place among forming gangs: higher priority first, then published first
  local created = tonumber(redis.call('HGET', jk, 'created_at') or '0') or 0
  redis.call('ZADD', KEYS[4], 'NX', (MAX_PRIORITY - tonumber(ARGV[6])) * 1e13 + math.floor(created * 1000),
             redis.call('HGET', jk, 'job_id'))
  alive = alive + 1
  top_up(alive, n)
  if alive == n then
    redis.call('HSET', gk, 'token', cjson.decode(ARGV[5]).seat)
    return {'complete', free}
  end
  return {'wait', free}
end

-- beat and leave: this member's seat, still its own?
local rank, seat = ARGV[3], ARGV[4]
local m = redis.call('HGET', gk, 'm:' .. rank)
if not m or cjson.decode(m).seat ~= seat then
  if op == 'leave' then return {'left', ''} end
  return {'evicted', ''}
end
local token = formed()
-- the gang's run started and ended since (requeued, failed): this member's seat is past
local past = not token and redis.call('HGET', gk, 'runs') ~= (redis.call('HGET', jk, 'runs') or '0')

if op == 'leave' then
  if token then return {'formed', token} end
  if past then return {'left', ''} end
  redis.call('HDEL', gk, 'm:' .. rank, 'beat:' .. rank, 'token')
  push('LPUSH')
  local alive, _, _, n = census(nil)
  if alive > 0 then top_up(alive, n) end
  return {'left', ''}
end

-- beat
redis.call('HSET', gk, 'beat:' .. rank, now)
if token then
  local halt = redis.call('HGET', gk, 'halt')
  if halt then return {'halt', halt} end
  for r = 0, tonumber(redis.call('HGET', gk, 'n')) - 1 do
    if tostring(r) ~= rank and not redis.call('HGET', gk, 'done:' .. r) then
      local beat = tonumber(redis.call('HGET', gk, 'beat:' .. r) or '0')
      if beat + ttl < now then
        local host = cjson.decode(redis.call('HGET', gk, 'm:' .. r) or '{"host":"?"}').host
        return {'broken', 'rank ' .. r .. ' on ' .. host}
      end
    end
  end
  return {'formed', token}
end
local state = redis.call('HGET', jk, 'state')
if past or state ~= 'queued' then return {'gone', state or 'no record'} end
local alive, _, _, n = census(nil)
top_up(alive, n)
if alive < n then
  local first = older(ARGV[5])
  if first then return {'yield', first} end
end
return {'wait', tostring(alive)}
