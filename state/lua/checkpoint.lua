-- A job's last synced checkpoint (tasks.checkpoint): {key, sha256, size, synced_at} JSON.
-- 'record': only the run that owns the job (running, same token) may say which upload is
-- the latest, so a stale run never replaces a newer run's checkpoint; returns the
-- previous value (the caller deletes that upload) or 'stale'; a retry of the same record
-- returns that previous value again.
-- 'drop': once the job succeeded its checkpoint is no longer needed; returns the value.
-- KEYS: job_key   ARGV: op, token, value_json
if ARGV[1] == 'drop' then
  if redis.call('HGET', KEYS[1], 'state') ~= 'succeeded' then return '' end
  local old = redis.call('HGET', KEYS[1], 'checkpoint') or ''
  redis.call('HDEL', KEYS[1], 'checkpoint', 'checkpoint_prev')
  return old
end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' or redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return 'stale'
end
local old = redis.call('HGET', KEYS[1], 'checkpoint') or ''
-- this very record again (its reply was lost): the one it replaced, never itself
if old == ARGV[3] then return redis.call('HGET', KEYS[1], 'checkpoint_prev') or '' end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[3], 'checkpoint_prev', old)
return old
