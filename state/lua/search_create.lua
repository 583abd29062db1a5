-- Record a new search, once: publishing the same search again changes nothing.
-- KEYS: search_key, searches_hash (name -> id), active_searches
-- ARGV: search_id, name, now, then field/value pairs (config, base, template, limits)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return 'exists' end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[2], 'created_at', ARGV[3], 'issued', 0,
           'ended', 0, 'fails', 0)
redis.call('SADD', KEYS[3], ARGV[1])
return 'new'
