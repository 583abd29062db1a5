-- The name of each job in KEYS (its record hash), false where it has no record.
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('HGET', key, 'name') end
return out
