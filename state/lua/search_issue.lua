-- Issue trial N of a search and publish its job, in one atomic step, fenced on the trial
-- counter (N must be the next number) and the budget (fewer than `trials` issued, fewer
-- than `parallel` live, not stopped). Two processes that advance at once both ask for N;
-- one wins, the other hears 'race' and asks again for N+1.
-- KEYS: search_key, live_set, trial_key, then publish.lua's KEYS
-- ARGV: N, now, params, dists, sys, then publish.lua's ARGV (job_id, name, now, force, ...)
--@@RELEASE@@
local function publish_one(KEYS, ARGV)
--@@PUBLISH@@
end
local sk, n = KEYS[1], tonumber(ARGV[1])
-- a search in a pipeline issues nothing until its upstreams succeeded (lua/release.lua)
if redis.call('HGET', sk, 'state') then return {'waiting', ''} end
local issued = tonumber(redis.call('HGET', sk, 'issued') or '-1')
if issued ~= n then return {'race', tostring(issued)} end
if redis.call('HGET', sk, 'stopped') then return {'stopped', ''} end
if n >= tonumber(redis.call('HGET', sk, 'trials')) then return {'full', ''} end
if redis.call('SCARD', KEYS[2]) >= tonumber(redis.call('HGET', sk, 'parallel')) then return {'busy', ''} end
redis.call('HSET', sk, 'issued', n + 1)
redis.call('HSET', KEYS[3], 'job_id', ARGV[6], 'params', ARGV[3], 'dists', ARGV[4], 'sys', ARGV[5],
           'issued_at', ARGV[2])
redis.call('SADD', KEYS[2], n)
local pargv = {}
for i = 6, #ARGV do pargv[#pargv + 1] = ARGV[i] end
local res = publish_one({KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}, pargv)
-- its search's inputs, resolved when the search was released, are every trial's
local inputs = redis.call('HGET', sk, 'input_jobs')
if inputs then redis.call('HSET', KEYS[4], 'input_jobs', inputs) end
return {'ok', res[1]}
