-- Messages a worker took from a queue but never claimed or acked (it died between
-- kombu's pop and the claim, or held a prefetched one) sit in kombu's unacked hash
-- until visibility_timeout (days). Past a cutoff of two lease TTLs:
--   * job still queued, and this delivery came after its last push: the only live copy
--     was lost with that worker, so push the record's message again (the claim dedupes);
--   * job queued with a newer push, or finished: the entry is a leftover; drop it;
--   * job running: the run's own message, acked when it ends; left alone.
-- Entries that are not fleet jobs are left to kombu.
-- KEYS: unacked_hash, unacked_index   ARGV: cutoff, now, job_prefix, max_entries
local out = {}
local entries = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[4]))
for i = 1, #entries, 2 do
  local tag, delivered_at = entries[i], tonumber(entries[i + 1])
  local raw = redis.call('HGET', KEYS[1], tag)
  local ok, decoded = false, nil
  if raw then ok, decoded = pcall(cjson.decode, raw) end
  local id = ok and type(decoded) == 'table' and type(decoded[1]) == 'table'
             and type(decoded[1]['headers']) == 'table' and decoded[1]['headers']['id']
  if not raw then
    redis.call('ZREM', KEYS[2], tag)               -- acked meanwhile: a stale index entry
  elseif type(id) == 'string' then
    local jk = ARGV[3] .. id
    local state = redis.call('HGET', jk, 'state')
    if state and state ~= 'running' then
      if state == 'queued' and tonumber(redis.call('HGET', jk, 'queued_at') or '0') < delivered_at
         and redis.call('HGET', jk, 'msg') then
        local n = redis.call('HINCRBY', jk, 'pushes', 1)
        redis.call('HSET', jk, 'queued_at', ARGV[2])
        redis.call('RPUSH', redis.call('HGET', jk, 'cur_key'),
                   (string.gsub(redis.call('HGET', jk, 'msg'), '@@FLEET%-TAG@@', id .. '.' .. n)))
        table.insert(out, id .. ' restored')
      end
      redis.call('HDEL', KEYS[1], tag)
      redis.call('ZREM', KEYS[2], tag)
    end
  end
end
return out
