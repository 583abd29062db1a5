-- Create a job's record and push its message in one atomic step.
-- KEYS: job_key, jobs_index, names_index, fallback_zset, owner_lists (lua/owned.lua, spliced by publish_many)
-- A pipeline's follower (its fields hold 'after') is recorded 'waiting' with its message kept,
-- not pushed: lua/release.lua queues it when its last upstream succeeds (at once, when they all
-- have). A job run again re-arms the followers its failure or cancel had cancelled.
-- ARGV: job_id, name, now, force, list_key, msg, fallback_at, then field/value pairs
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'running' then return {'skip', state} end
if state and ARGV[4] ~= '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[2])
  return {'skip', state}
end
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
local follower = redis.call('HEXISTS', KEYS[1], 'after') == 1
redis.call('HSET', KEYS[1], 'state', 'queued', 'queued_at', ARGV[3], 'cur_key', ARGV[5], 'msg', ARGV[6],
           'pri_key', ARGV[5], 'pri_msg', ARGV[6], 'pri_queue', redis.call('HGET', KEYS[1], 'queue') or '')
redis.call('HDEL', KEYS[1], 'worker', 'token', 'gpu', 'cores', 'started_at', 'finished_at', 'last_error',
           'artifact', 'result', 'heartbeat_at', 'end', 'end_reason', 'end_detail',
           'rerun_reason', 'cancelled_by', 'input_jobs', 'released_at', 'released_by')
-- a new run from scratch: no trained output of an old run, no old checkpoint (tasks.checkpoint)
redis.call('HDEL', KEYS[1], 'trained_at', 'trained_host', 'trained_dir', 'trained_grace_s', 'checkpoint')
if not state then
  redis.call('HSET', KEYS[1], 'created_at', ARGV[3], 'attempts', 0)
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'attempts', 0)
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
local K = pipe_keys(string.match(KEYS[1], '^(.*:)'))
if state then pipe_rearm(K, 'job:' .. ARGV[1], ARGV[3]) end
if follower then
  redis.call('HDEL', KEYS[1], 'queued_at')
  if redis.call('HEXISTS', KEYS[1], 'params_from') == 1 then redis.call('HDEL', KEYS[1], 'params') end
  pipe_arm(K, 'job:' .. ARGV[1], ARGV[3])
  return {'publish', state or ''}
end
local n = redis.call('HINCRBY', KEYS[1], 'pushes', 1)
-- a plain find, not gsub: gsub's pattern scan of the message cost more than the rest of this script
local msg, i, j = ARGV[6], string.find(ARGV[6], '@@FLEET-TAG@@', 1, true)
if i then msg = string.sub(msg, 1, i - 1) .. ARGV[1] .. '.' .. n .. string.sub(msg, j + 1) end
owned_push('LPUSH', ARGV[5], msg, KEYS[5])
if ARGV[7] ~= '' then redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1]) end
return {'publish', state or ''}
