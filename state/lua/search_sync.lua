-- Count every trial whose job has ended since the last sync, exactly once: a live trial
-- leaves the live set in the same step that counts its end, so two processes that saw the
-- same end (its worker, the sweep) never count it twice. Updates the counters, the best,
-- the run of failures (and stops the search at max_failures), and retires a finished search.
-- KEYS: search_key, live_set, active_searches
-- ARGV: job_prefix, now, default max_failures (core.constants, for a search that has none)
-- A search done (every trial it issued ended, no more to issue) records its outcome once, for
-- the jobs after it: succeeded with a best trial, else failed (stopped on its failure budget or
-- its metric, or no trial gave a value); they are released or cancelled in this same step.
--@@RELEASE@@
local sk = KEYS[1]
local metric, dir = redis.call('HGET', sk, 'metric'), redis.call('HGET', sk, 'direction')
local max_failures = tonumber(redis.call('HGET', sk, 'max_failures') or ARGV[3])
local ENDED = {succeeded = true, failed = true, cancelled = true, pruned = true}

-- The trial's final value, written here once, when its end is counted: its metric at its
-- greatest step as its search heard it (the trial hash's last_value, written by its worker,
-- tasks/trial.py), else (a run finished from its log) the one in its result. A trial that
-- succeeded as a job but has no finite value is failed for the search, with the reason.
local NON_FINITE = {nan = true, inf = true, ['-inf'] = true, ['-nan'] = true}

local function final_value(tk, jk, state)
  local value = redis.call('HGET', tk, 'last_value')
  if not value and state == 'succeeded' then
    local res = redis.call('HGET', jk, 'result')
    local ok, d = pcall(cjson.decode, res or '')
    if ok and type(d) == 'table' and type(d.metrics) == 'table' then
      local v = d.metrics[metric]
      if type(v) == 'number' then value = tostring(v)
      elseif type(v) == 'string' and NON_FINITE[v] then value = v end
    end
  end
  return value or nil
end

-- Why a trial has no result ('' when it has one), and, when it printed other keys but never
-- the metric, what it printed: then the manifest names a key no trial prints, not a trial's
-- failure, and the search stops at once rather than run its failure budget of full trials.
local function why_no_result(n, tk, value)
  if value == nil then
    local keys = redis.call('HGET', tk, 'keys')
    local printed = (keys and keys ~= '') and ('it printed ' .. keys) or 'it printed no numeric metric'
    return "no '" .. metric .. "' in trial " .. n .. "'s metric lines; " .. printed,
           (keys and keys ~= '') and keys or nil
  end
  local v = tonumber(value)
  if NON_FINITE[value] or v == nil or v ~= v or v == math.huge or v == -math.huge then
    return 'trial ' .. n .. ' ended with ' .. metric .. '=' .. value .. ', not a result'
  end
  return nil
end

-- Why a trial's job failed, in one bounded line: its run's end reason (the output line that
-- says what went wrong, tasks/run.py failure_reason), else its error's first line and, when
-- that only introduces the output below it, the last line of that output.
local REASON_MAX = 300
local function job_failure(n, jk)
  local why = redis.call('HGET', jk, 'end_reason')
  if not why or why == '' then
    local err = redis.call('HGET', jk, 'last_error') or ''
    why = string.match(err, '[^\n]*')
    local last = string.match(err, '\n%s*([^\n]-)%s*$')
    if last and last ~= '' and last ~= why then why = why .. ' ' .. last end
  end
  if why == '' then why = 'failed (no reason recorded)' end
  why = 'trial ' .. n .. ' ' .. why
  if #why > REASON_MAX then why = string.sub(why, 1, REASON_MAX - 3) .. '...' end
  return why
end

local function count_failure(err)
  local fails = redis.call('HINCRBY', sk, 'fails', 1)
  redis.call('HSET', sk, 'last_failure', err)
  if fails >= max_failures and not redis.call('HGET', sk, 'stopped') then
    redis.call('HSET', sk, 'stopped', fails .. ' trials failed in a row (max_failures=' .. max_failures
               .. '); the last: ' .. err)
  end
end

local function better(v)
  local best = redis.call('HGET', sk, 'best_value')
  if not best then return true end
  if dir == 'maximize' then return v > tonumber(best) end
  return v < tonumber(best)
end

local out = {}
for _, n in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local tk = sk .. ':trial:' .. n
  local jk = ARGV[1] .. (redis.call('HGET', tk, 'job_id') or '')
  local state = redis.call('HGET', jk, 'state') or 'cancelled'   -- a record removed by hand: over
  if ENDED[state] then
    redis.call('SREM', KEYS[2], n)
    local value, reason, printed = final_value(tk, jk, state), nil, nil
    if state == 'succeeded' or (state == 'pruned' and value ~= nil) then
      reason, printed = why_no_result(n, tk, value)
    end
    if reason then state, value = 'failed', nil end   -- for the search; the job did succeed
    if printed and not redis.call('HGET', sk, 'stopped') then
      redis.call('HSET', sk, 'stopped', "metric '" .. metric .. "' is in no line trial " .. n
                 .. ' printed (it printed ' .. printed .. '): fix the metric of the manifest\'s'
                 .. ' [jobs.search] to one of those keys, or make the trials print it')
    end
    if state == 'failed' and not reason then reason = job_failure(n, jk) end
    redis.call('HSET', tk, 'state', state, 'ended_at', ARGV[2])
    if value then redis.call('HSET', tk, 'value', value) else redis.call('HDEL', tk, 'value') end
    if reason then redis.call('HSET', tk, 'reason', reason) else redis.call('HDEL', tk, 'reason') end
    redis.call('HINCRBY', sk, 'ended', 1)
    redis.call('HINCRBY', sk, state, 1)
    if state == 'failed' then
      count_failure(reason)
    elseif state ~= 'cancelled' then
      redis.call('HSET', sk, 'fails', 0)
    end
    if state == 'succeeded' and value and better(tonumber(value)) then
      redis.call('HSET', sk, 'best_value', value, 'best_trial', n)
    end
    table.insert(out, n)
  end
end
local no_more = redis.call('HGET', sk, 'stopped')
  or tonumber(redis.call('HGET', sk, 'issued') or '0') >= tonumber(redis.call('HGET', sk, 'trials') or '0')
if no_more and redis.call('SCARD', KEYS[2]) == 0 and not redis.call('HGET', sk, 'state') then
  local id = redis.call('HGET', sk, 'id')
  redis.call('SREM', KEYS[3], id)
  if not redis.call('HGET', sk, 'outcome') then
    local outcome, why = 'succeeded', ''
    local stopped = redis.call('HGET', sk, 'stopped')
    if stopped then
      outcome, why = 'failed', 'stopped: ' .. stopped
    elseif not redis.call('HGET', sk, 'best_trial') then
      outcome, why = 'failed', 'no trial succeeded with a value of ' .. metric
    end
    redis.call('HSET', sk, 'outcome', outcome, 'outcome_reason', why, 'done_at', ARGV[2])
    pipe_ended(pipe_keys(ARGV[1]), 'search:' .. id, outcome == 'succeeded', ARGV[2])
  end
end
return out
