-- A trial's run reports to its search (tasks/trial.py): the metric at steps its pruner heard,
-- its value at its greatest step (the trial's final value once search_sync.lua counts its
-- end), the keys it printed, or its pruner's system attrs after a decision. Fenced as the
-- job record's writes are: only the run that owns the trial's job (running, same token)
-- writes, so a run taken over in a partition never sets the value its successor ends with.
-- KEYS: job_key, trial_key, iv_key
-- ARGV: token, n, then n step/value pairs for iv_key, then field/value pairs for trial_key
-- Returns 'ok', or 'stale' (nothing written).
if redis.call('HGET', KEYS[1], 'state') ~= 'running' or redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 'stale'
end
local steps_end = 2 + 2 * tonumber(ARGV[2])
for i = 3, steps_end, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
for i = steps_end + 1, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 'ok'
