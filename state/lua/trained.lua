-- Trained output is durable. 'mark': the run's trainer exited 0; the record names the host
-- and work dir, and the job stays with that run for trained_grace_s after its last
-- heartbeat (reap.lua, claim.lua), so a worker killed now and restarted on the same host
-- uploads the output instead of anyone training the job again.
-- 'resume': that restarted worker takes the run back, under the dead run's own token: the
-- job is still this run's (running, same token), or the reaper handed it on after the
-- grace and nobody claimed it yet (queued, its marker still names this host and dir).
-- KEYS: job_key, lease_key, running_set
-- ARGV: op, token, host, work_dir, now, grace_s (mark) or ttl_ms (resume)
local state = redis.call('HGET', KEYS[1], 'state')
local token = redis.call('HGET', KEYS[1], 'token')
if ARGV[1] == 'mark' then
  if state ~= 'running' or token ~= ARGV[2] then return 'stale' end
  redis.call('HSET', KEYS[1], 'trained_at', ARGV[5], 'trained_host', ARGV[3], 'trained_dir', ARGV[4],
             'trained_grace_s', ARGV[6])
  return 'ok'
end
local mine = state == 'running' and token == ARGV[2]
local handed_on = state == 'queued' and redis.call('HGET', KEYS[1], 'trained_host') == ARGV[3]
  and redis.call('HGET', KEYS[1], 'trained_dir') == ARGV[4]
if not (mine or handed_on) then return state or 'missing' end
redis.call('HSET', KEYS[1], 'state', 'running', 'token', ARGV[2], 'worker', ARGV[3], 'heartbeat_at', ARGV[5])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[6])
redis.call('SADD', KEYS[3], redis.call('HGET', KEYS[1], 'job_id'))
return 'ok'
