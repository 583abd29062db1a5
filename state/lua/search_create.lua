-- Record a new search, once: publishing the same search again changes nothing, and a
-- search whose name another search holds is refused (its trials' names, `fleet results NAME`
-- and `fleet status` would mix the two), with nothing written.
-- KEYS: search_key, searches_hash (name -> id), active_searches
-- ARGV: search_id, name, now, then field/value pairs (config, base, template, limits)
-- Returns {what, the id the name holds}: what is new, exists or name_taken.
local holder = redis.call('HGET', KEYS[2], ARGV[2])
if holder and holder ~= ARGV[1] then return {'name_taken', holder} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ARGV[1]} end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[3], 'issued', 0,
           'ended', 0, 'fails', 0)
redis.call('SADD', KEYS[3], ARGV[1])
return {'new', ARGV[1]}
