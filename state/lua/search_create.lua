-- Record a new search, once: publishing the same search again changes nothing, and a
-- search whose name another search holds is refused (its trials' names, `fleet results NAME`
-- and `fleet status` would mix the two), with nothing written.
-- KEYS: search_key, searches_hash (name -> id), active_searches
-- ARGV: search_id, name, now, then field/value pairs (config, base, template, limits)
-- A search in a pipeline (its fields hold 'after') waits, out of the active set, until its
-- upstreams succeeded (lua/release.lua).
-- Returns {what, the id the name holds}: what is new, exists or name_taken.
--@@RELEASE@@
local holder = redis.call('HGET', KEYS[2], ARGV[2])
if holder and holder ~= ARGV[1] then return {'name_taken', holder} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ARGV[1]} end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[3], 'issued', 0,
           'ended', 0, 'fails', 0)
if redis.call('HEXISTS', KEYS[1], 'after') == 1 then
  pipe_arm(pipe_keys(string.match(KEYS[1], '^(.*)search:') .. 'job:'), 'search:' .. ARGV[1], ARGV[3])
else
  redis.call('SADD', KEYS[3], ARGV[1])
end
return {'new', ARGV[1]}
