-- A delivery asks to run a job. Exactly one delivery wins; the rest are dropped.
-- A win is a new run: 'attempts' counts towards max_attempts (a requeue resets it, a
-- hand-back gives it back), 'runs' counts every run the job ever had and is never reset,
-- so each run gets its own number in `fleet logs` and `tries`.
-- KEYS: job_key, lease_key, running_set, fallback_zset, then jobs_index when adopting (only
--       then written: a worker's ACL user may not write it, and Redis checks declared keys)
-- ARGV: job_id, worker, token, ttl_ms, now, spec_json, default_max_attempts, queue, adopt ('1' or '0')
-- A job whose attempts are spent fails here, and its pipeline's followers are cancelled.
--@@RELEASE@@
local state = redis.call('HGET', KEYS[1], 'state')
if not state and ARGV[9] ~= '1' then return {'drop', 'no record'} end
if not state then
  -- a message sent without `fleet publish` (e.g. apply_async), adopted by setting
  redis.call('HSET', KEYS[1], 'job_id', ARGV[1], 'state', 'queued', 'spec', ARGV[6],
             'created_at', ARGV[5], 'queued_at', ARGV[5], 'attempts', 0, 'queue', ARGV[8])
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
  state = 'queued'
end
if state == 'running' and redis.call('HGET', KEYS[1], 'token') == ARGV[3] then
  -- this very claim again (redis-py retries a command whose reply was lost): the same
  -- answer, nothing counted twice, the lease renewed as the first call set it
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  return {'run', redis.call('HGET', KEYS[1], 'attempts'), redis.call('HGET', KEYS[1], 'runs')}
end
if state == 'running' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'drop', 'running on ' .. (redis.call('HGET', KEYS[1], 'worker') or '?')}
  end
  local grace = redis.call('HGET', KEYS[1], 'trained_grace_s')   -- trained.lua: held for its host
  if grace and tonumber(ARGV[5]) < tonumber(redis.call('HGET', KEYS[1], 'heartbeat_at') or '0') + tonumber(grace) then
    return {'drop', 'trained on ' .. (redis.call('HGET', KEYS[1], 'trained_host') or '?') .. ', waiting for its upload'}
  end
elseif state ~= 'queued' then
  return {'drop', state}
end
local max = tonumber(redis.call('HGET', KEYS[1], 'max_attempts') or ARGV[7])
local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
if attempts >= max then
  local why = 'gave up after ' .. attempts .. ' attempt(s) whose worker was lost'
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[5], 'last_error', why,
             'end', 'lost', 'end_reason', why, 'end_detail', '')
  redis.call('SREM', KEYS[3], ARGV[1])
  pipe_job_ended(KEYS[1], 'failed', ARGV[5])
  return {'drop', 'failed'}
end
attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
local runs = redis.call('HINCRBY', KEYS[1], 'runs', 1)
redis.call('HSET', KEYS[1], 'state', 'running', 'worker', ARGV[2], 'token', ARGV[3],
           'started_at', ARGV[5], 'heartbeat_at', ARGV[5], 'queue', ARGV[8])
-- why this run is not its first: how the run before it ended, that put it back (lost, handed
-- back, failed and retried), kept past this run's own end for `fleet show` and `fleet why`
local prior = redis.call('HGET', KEYS[1], 'end_reason')
if runs > 1 and prior and prior ~= '' then
  redis.call('HSET', KEYS[1], 'rerun_reason',
             'run ' .. (runs - 1) .. ' ' .. (redis.call('HGET', KEYS[1], 'end') or 'ended') .. ': ' .. prior)
end
redis.call('HDEL', KEYS[1], 'last_error', 'finished_at', 'end', 'end_reason', 'end_detail')
-- the previous run's progress and GPU are not this run's: it reports its own
redis.call('HDEL', KEYS[1], 'progress', 'gpu', 'cores')
redis.call('HDEL', KEYS[1], 'trained_at', 'trained_host', 'trained_dir', 'trained_grace_s')
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return {'run', tostring(attempts), tostring(runs)}
