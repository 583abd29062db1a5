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
