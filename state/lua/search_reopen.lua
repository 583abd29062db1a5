-- A trial whose job was requeued after it ended runs again: its counted end is taken back
-- (the per-state count, `ended`, its state and value, the best when it was the best) and it
-- is live once more, so the next sync counts its new end, once. The run of failures and a
-- stop stay as they are. Idempotent: a trial already live (its end not counted yet) is left.
-- KEYS: search_key, live_set, trial_key, active_searches   ARGV: N
-- Returns 'reopened', 'live' or 'missing'.
local sk, n = KEYS[1], ARGV[1]
if redis.call('EXISTS', sk) == 0 or redis.call('EXISTS', KEYS[3]) == 0 then return 'missing' end
if redis.call('SISMEMBER', KEYS[2], n) == 1 then return 'live' end
local state = redis.call('HGET', KEYS[3], 'state')
if not state then return 'missing' end
redis.call('HINCRBY', sk, 'ended', -1)
redis.call('HINCRBY', sk, state, -1)
redis.call('HDEL', KEYS[3], 'state', 'value', 'reason', 'ended_at')
redis.call('SADD', KEYS[2], n)
redis.call('SADD', KEYS[4], redis.call('HGET', sk, 'id'))
redis.call('HINCRBY', sk, 'reopened', 1)   -- mirrors (state/study.py) rebuild: Optuna never reopens a trial
if redis.call('HGET', sk, 'best_trial') == n then   -- the best again among the others that succeeded
  local maximize = redis.call('HGET', sk, 'direction') == 'maximize'
  local best, at = nil, nil
  for i = 0, tonumber(redis.call('HGET', sk, 'issued') or '0') - 1 do
    local s, v = unpack(redis.call('HMGET', sk .. ':trial:' .. i, 'state', 'value'))
    v = s == 'succeeded' and tonumber(v)
    if v and (best == nil or (maximize and v > best) or (not maximize and v < best)) then best, at = v, i end
  end
  if best then
    redis.call('HSET', sk, 'best_value', tostring(best), 'best_trial', at)
  else
    redis.call('HDEL', sk, 'best_value', 'best_trial')
  end
end
return 'reopened'
