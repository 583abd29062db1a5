-- Give back queued jobs whose message a lost BRPOP reply took: Redis popped it, the worker
-- never received it (Redis restarted, the connection reset mid-reply), so it is in no list
-- and not in kombu's unacked hash, and nothing else would ever push it again. Run in chunks
-- (state.records.Records.reconcile_lost), only for the queues of a poll that failed:
--   'seen'  ARGV: mode, list_key, start, count, seen_ttl_ms    KEYS: seen_set
--           the delivery tags of list entries start..start+count-1 go into seen_set;
--           returns how many entries were read (fewer than count: the list's end)
--   'jobs'  ARGV: mode, job_prefix, then job ids
--           KEYS: seen_set, wanted_hash, unacked_hash, owner_lists
--           a queued job whose latest push went to a wanted queue, and whose tag is neither
--           seen nor unacked nor (looked up at once, for pushes since 'seen') in its list,
--           is pushed again to the front of that list. A copy that was not lost after all
--           (one popped in between by a healthy worker) is a duplicate the claim drops.
--   'forget' ARGV: mode, then list key/time pairs KEYS: wanted_hash
--           drop the requests answered, not one made again since (a later time)
-- The orphan sweep (Records.sweep_orphans) needs no lost poll: it finds queued jobs whose
-- latest message is nowhere, whatever lost it (a failover dropping writes the old master had
-- acknowledged: a pop replicated, kombu's unacked write not). A job has a message when the
-- tag of its latest push ('<id>.<pushes>') is in a list, in kombu's unacked hash, or in the
-- dead letter; a pop not yet in unacked (a worker between BRPOP and kombu's HSET, or
-- kombu's own restore between HDEL and LPUSH) lasts milliseconds, so a job is pushed only
-- when two sweeps at least grace_ms apart both found it without one, at the same push.
--   'queued' ARGV: mode, job_prefix, then job ids
--            returns id, cur_key pairs of the queued jobs that have a message of their own
--   'orphans' ARGV: mode, job_prefix, grace_ms, then job ids
--            KEYS: seen_set, unacked_hash, owner_lists, orphans_hash, dead_letter
--            orphans_hash holds id -> '<pushes>:<ms first found without a message>'. A
--            job found without one (looked up at once in its own list and the dead letter)
--            is noted; noted at the same push grace_ms ago, it is pushed again to the front,
--            fenced by that push count: a second sweeper, or this call retried, finds the
--            count moved on and the new message listed, and pushes nothing.
--@@OWNED@@
-- the queue of a list key (state/queues.py parse): '<queue>[\6\23<owner>][\6\22<pri>]'
local function queue_of(key)
  local head = string.match(key, '^(.*)\6\22%d+$') or key
  return string.match(head, '^(.-)\6\23') or head
end
local mode = ARGV[1]
if mode == 'seen' then
  local start = tonumber(ARGV[3])
  local items = redis.call('LRANGE', ARGV[2], start, start + tonumber(ARGV[4]) - 1)
  for _, item in ipairs(items) do
    local tag = string.match(item, '"delivery_tag": *"(%x+%.%d+)"')
    if tag then redis.call('SADD', KEYS[1], tag) end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return #items
elseif mode == 'forget' then
  for i = 2, #ARGV, 2 do
    if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
      redis.call('HDEL', KEYS[1], ARGV[i])
    end
  end
  return 0
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function dead_lettered(tag)
  for _, e in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do
    if string.find(e, tag .. '\\"', 1, true) or string.find(e, tag .. '"', 1, true) then
      return true
    end
  end
  return false
end
if mode == 'queued' then
  local out = {}
  for i = 3, #ARGV do
    local state, key, msg = unpack(redis.call('HMGET', ARGV[2] .. ARGV[i], 'state', 'cur_key', 'msg'))
    if state == 'queued' and key and msg then
      table.insert(out, ARGV[i])
      table.insert(out, key)
    end
  end
  return out
elseif mode == 'orphans' then
  local out, now, grace = {}, now_ms(), tonumber(ARGV[3])
  for i = 4, #ARGV do
    local id = ARGV[i]
    local jk = ARGV[2] .. id
    local state, key, n, msg = unpack(redis.call('HMGET', jk, 'state', 'cur_key', 'pushes', 'msg'))
    local tag = n and (id .. '.' .. n)
    local orphan = state == 'queued' and key and n and msg
      and redis.call('SISMEMBER', KEYS[1], tag) == 0 and redis.call('HEXISTS', KEYS[2], tag) == 0
      and not redis.call('LPOS', key, (string.gsub(msg, '@@FLEET%-TAG@@', tag)))
      and not dead_lettered(tag)
    if not orphan then
      redis.call('HDEL', KEYS[4], id)
    else
      local noted = redis.call('HGET', KEYS[4], id)
      local at_n, since = string.match(noted or '', '^(%d+):(%d+)$')
      if at_n ~= n then
        redis.call('HSET', KEYS[4], id, n .. ':' .. now)
      elseif now - tonumber(since) >= grace then
        local pushes = redis.call('HINCRBY', jk, 'pushes', 1)
        owned_push('RPUSH', key, (string.gsub(msg, '@@FLEET%-TAG@@', id .. '.' .. pushes)), KEYS[3])
        redis.call('HDEL', KEYS[4], id)
        table.insert(out, id .. ' pushed again: queued ' .. math.floor((now - tonumber(since)) / 1000)
          .. ' s with no message in any list, unacked or dead letter')
      end
    end
  end
  return out
end
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local jk = ARGV[2] .. id
  local state, key, n, msg = unpack(redis.call('HMGET', jk, 'state', 'cur_key', 'pushes', 'msg'))
  if state == 'queued' and key and n and msg
      and redis.call('HEXISTS', KEYS[2], queue_of(key)) == 1 then
    local tag = id .. '.' .. n
    local live = string.gsub(msg, '@@FLEET%-TAG@@', tag)
    if redis.call('SISMEMBER', KEYS[1], tag) == 0 and redis.call('HEXISTS', KEYS[3], tag) == 0
        and not redis.call('LPOS', key, live) then
      local pushes = redis.call('HINCRBY', jk, 'pushes', 1)
      owned_push('RPUSH', key, (string.gsub(msg, '@@FLEET%-TAG@@', id .. '.' .. pushes)), KEYS[4])
      table.insert(out, id .. ' pushed again: its message was lost with a poll\'s reply')
    end
  end
end
return out
