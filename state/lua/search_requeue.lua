-- Run an ended trial again, in one step: its job is queued again (lua/publish.lua spliced in,
-- forced) and its counted end is taken back (the per-state count, `ended`, its state and
-- value, the best when it was the best), and it is live once more, so the next sync counts
-- its new end, once. A requeued trial counts as queued, then running: while `parallel` are
-- live it is refused and nothing changes. The run of failures and a stop stay as they are.
-- A trial still live (its end not counted yet) stays live: only its job is queued again.
-- KEYS: search_key, live_set, trial_key, active_searches, then publish.lua's KEYS
-- ARGV: N, then publish.lua's ARGV (job_id, name, now, force, ...)
-- Returns {what, the job's state before}: what is requeued, not_ended, full or missing.
--@@RELEASE@@
local function publish_one(KEYS, ARGV)
--@@PUBLISH@@
end
local ENDED = {succeeded = true, failed = true, cancelled = true, pruned = true}
local sk, n = KEYS[1], ARGV[1]
local was = redis.call('HGET', KEYS[5], 'state') or ''
if not ENDED[was] then return {'not_ended', was} end
local pkeys, pargv = {KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]}, {}
for i = 2, #ARGV do pargv[#pargv + 1] = ARGV[i] end
if redis.call('EXISTS', sk) == 0 or redis.call('EXISTS', KEYS[3]) == 0 then
  publish_one(pkeys, pargv)
  return {'missing', was}
end
if redis.call('SISMEMBER', KEYS[2], n) == 0 then
  if redis.call('SCARD', KEYS[2]) >= tonumber(redis.call('HGET', sk, 'parallel')) then
    return {'full', was}
  end
  local state = redis.call('HGET', KEYS[3], 'state')
  if state then
    redis.call('HINCRBY', sk, 'ended', -1)
    redis.call('HINCRBY', sk, state, -1)
    redis.call('HDEL', KEYS[3], 'state', 'value', 'reason', 'ended_at')
  end
  redis.call('SADD', KEYS[2], n)
  redis.call('SADD', KEYS[4], redis.call('HGET', sk, 'id'))
  -- open again: no outcome until it is done again; the jobs after it that its failure
  -- cancelled wait again (lua/release.lua)
  if redis.call('HGET', sk, 'outcome') then
    redis.call('HDEL', sk, 'outcome', 'outcome_reason', 'done_at')
    pipe_rearm(pipe_keys(string.match(KEYS[5], '^(.*:)')), 'search:' .. redis.call('HGET', sk, 'id'), ARGV[4])
  end
  redis.call('HINCRBY', sk, 'reopened', 1)   -- mirrors (state/search/study.py) rebuild: Optuna never reopens a trial
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
end
publish_one(pkeys, pargv)
return {'requeued', was}
