-- Count every trial whose job has ended since the last sync, exactly once: a live trial
-- leaves the live set in the same step that counts its end, so two processes that saw the
-- same end (its worker, the sweep) never count it twice. Updates the counters, the best,
-- the run of failures (and stops the search at max_failures), and retires a finished search.
-- KEYS: search_key, live_set, active_searches   ARGV: job_prefix, now
local sk = KEYS[1]
local metric, dir = redis.call('HGET', sk, 'metric'), redis.call('HGET', sk, 'direction')
local max_failures = tonumber(redis.call('HGET', sk, 'max_failures') or '5')
local ENDED = {succeeded = true, failed = true, cancelled = true, pruned = true}

-- the metric at the trial's last step, else (no step reported) the one in its result
local function final_value(n, jk, state)
  local iv, step, value = redis.call('HGETALL', sk .. ':iv:' .. n), nil, nil
  for i = 1, #iv, 2 do
    local s = tonumber(iv[i])
    if step == nil or s > step then step, value = s, iv[i + 1] end
  end
  local res = state == 'succeeded' and value == nil and redis.call('HGET', jk, 'result')
  if res then
    local ok, d = pcall(cjson.decode, res)
    if ok and type(d) == 'table' and type(d.metrics) == 'table' and type(d.metrics[metric]) == 'number' then
      value = tostring(d.metrics[metric])
    end
  end
  return value
end

local function count_failure(jk)
  local fails = redis.call('HINCRBY', sk, 'fails', 1)
  if fails >= max_failures and not redis.call('HGET', sk, 'stopped') then
    local err = string.match(redis.call('HGET', jk, 'last_error') or '', '[^\n]*')
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
    local value = final_value(n, jk, state)
    redis.call('HSET', tk, 'state', state, 'ended_at', ARGV[2])
    if value then redis.call('HSET', tk, 'value', value) end
    redis.call('HINCRBY', sk, 'ended', 1)
    redis.call('HINCRBY', sk, state, 1)
    if state == 'failed' then
      count_failure(jk)
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
if no_more and redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[3], redis.call('HGET', sk, 'id'))
end
return out
