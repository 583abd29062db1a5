-- Messages a worker took from a queue but never claimed or acked (it died between
-- kombu's pop and the claim, or held a prefetched one) sit in kombu's unacked hash
-- until visibility_timeout (days). Every fleet push is tagged '<job_id>.<n>' (n counts
-- the job's pushes), so no clock is needed to tell the live copy from a leftover. Past
-- a cutoff of two lease TTLs:
--   * job queued and this is its latest push: the only live copy was lost with that
--     worker, so push the record's message again (the claim dedupes any survivor);
--   * job queued with a newer push, or finished: a leftover; dropped;
--   * job running, or not a fleet job: left alone (a run's own message is acked when
--     it ends; anything else is kombu's to restore).
-- KEYS: unacked_hash, unacked_index, owner_lists   ARGV: cutoff, job_prefix, max_entries
--@@OWNED@@
local out = {}
local tags = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, tag in ipairs(tags) do
  local id, n = string.match(tag, '^(%x+)%.(%d+)$')
  local jk = id and ARGV[2] .. id
  local state = jk and redis.call('HGET', jk, 'state')
  if redis.call('HEXISTS', KEYS[1], tag) == 0 then
    redis.call('ZREM', KEYS[2], tag)                  -- acked meanwhile: a stale index entry
  elseif state == 'queued' and n == redis.call('HGET', jk, 'pushes') then
    if redis.call('HGET', jk, 'msg') then
      local pushes = redis.call('HINCRBY', jk, 'pushes', 1)
      owned_push('RPUSH', redis.call('HGET', jk, 'cur_key'),
                 (string.gsub(redis.call('HGET', jk, 'msg'), '@@FLEET%-TAG@@', id .. '.' .. pushes)), KEYS[3])
      redis.call('HDEL', KEYS[1], tag)
      redis.call('ZREM', KEYS[2], tag)
      table.insert(out, id .. ' restored')
    end
  elseif state and state ~= 'running' then
    redis.call('HDEL', KEYS[1], tag)
    redis.call('ZREM', KEYS[2], tag)
  end
end
return out
