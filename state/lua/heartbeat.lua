-- Renew a running job's lease; tell the runner if it must stop.
-- KEYS: job_key, lease_key   ARGV: token, ttl_ms, now, then field/value pairs to record
-- Returns 'ok', or the reason to stop: 'cancelled', 'lost' (another run owns the job) ...
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then return state or 'lost' end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 'lost' end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return 'lost' end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[1], 'heartbeat_at', ARGV[3])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 'ok'
