-- Ack one delivery, unless that would strand its job: the live copy (latest push) of a
-- job still queued was taken but never claimed, so the job did not run (the worker
-- failed before its claim). That entry stays in kombu's unacked hash, where the reaper's
-- restore (restore.lua) pushes it again once it is two lease TTLs old. Any other
-- delivery (a run that ended, a duplicate, a leftover, not a fleet job) is acked.
-- KEYS: unacked_hash, unacked_index   ARGV: delivery_tag, job_prefix
local id, n = string.match(ARGV[1], '^(%x+)%.(%d+)$')
if id and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local jk = ARGV[2] .. id
  if redis.call('HGET', jk, 'state') == 'queued' and redis.call('HGET', jk, 'pushes') == n
     and redis.call('HEXISTS', jk, 'msg') == 1 then
    return 'kept'
  end
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return 'acked'
