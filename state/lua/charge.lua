-- Charge the run that ``token`` owns (or owned: a cancelled run keeps its token) to its owner,
-- up to now: while it runs (now and then) and when it ends.
-- KEYS: job_key, usage_hash   ARGV: token, now, half_life_s
--@@OWNED@@
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local now = tonumber(ARGV[2])
return tostring(charge_run(KEYS[1], KEYS[2], ARGV[1], now, now, tonumber(ARGV[3])))
