-- Cancel a waiting, queued or running job, and (lua/release.lua) every job after it in its
-- pipeline. A running job's worker sees the state on its next heartbeat.
-- KEYS: job_key, lease_key, running_set, fallback_zset   ARGV: job_id, now
-- Returns {'1', state it was in} when it cancelled the job, else {'0', its state ('' if none)}.
local state = redis.call('HGET', KEYS[1], 'state')
--@@RELEASE@@
if state ~= 'queued' and state ~= 'running' and state ~= 'waiting' then return {'0', state or ''} end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[2],
           'last_error', 'cancelled by operator',
           'end', 'cancelled', 'end_reason', 'cancelled by operator', 'end_detail', '')
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
pipe_job_ended(KEYS[1], 'cancelled', ARGV[2])
return {'1', state}
