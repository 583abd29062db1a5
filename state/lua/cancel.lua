-- Cancel a queued or running job. A running job's worker sees the state on its next heartbeat.
-- KEYS: job_key, lease_key, running_set, fallback_zset   ARGV: job_id, now
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return state or 'missing' end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[2], 'last_error', 'cancelled by operator')
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 'ok:' .. state
