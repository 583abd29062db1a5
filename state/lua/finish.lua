-- End a run: succeeded, failed, or back to the queue (retry / release on shutdown).
-- KEYS: job_key, lease_key, running_set, fallback_zset, owner_lists
--@@RELEASE@@
-- ARGV: token, new_state, now, count_attempt ('1' or '0'), then field/value pairs
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  -- this run's own finish again (its reply was lost, the client retried): done already
  if redis.call('HGET', KEYS[1], 'ended_token') == ARGV[1] then return 'ok' end
  return 'stale'
end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then return 'stale' end
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], redis.call('HGET', KEYS[1], 'job_id'))
redis.call('HDEL', KEYS[1], 'token')
redis.call('HSET', KEYS[1], 'ended_token', ARGV[1])
if ARGV[2] == 'queued' and not redis.call('HGET', KEYS[1], 'pri_msg') then
  local why = (redis.call('HGET', KEYS[1], 'last_error') or '')
    .. ' (cannot requeue: it was not sent by fleet publish)'
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[3], 'last_error', why,
             'end', 'failed', 'end_reason', why)
  pipe_job_ended(KEYS[1], 'failed', ARGV[3])
elseif ARGV[2] == 'queued' then
  if ARGV[4] == '0' then redis.call('HINCRBY', KEYS[1], 'attempts', -1) end
  local id = redis.call('HGET', KEYS[1], 'job_id')
  -- back to the queue it was published to; a prefer_cuda job gets its grace again
  redis.call('HSET', KEYS[1], 'state', 'queued', 'queued_at', ARGV[3],
             'cur_key', redis.call('HGET', KEYS[1], 'pri_key'), 'msg', redis.call('HGET', KEYS[1], 'pri_msg'),
             'queue', redis.call('HGET', KEYS[1], 'pri_queue'))
  redis.call('HDEL', KEYS[1], 'worker', 'gpu')
  local grace = redis.call('HGET', KEYS[1], 'fb_grace_s')
  if grace then redis.call('ZADD', KEYS[4], tonumber(ARGV[3]) + tonumber(grace), id) end
  local n = redis.call('HINCRBY', KEYS[1], 'pushes', 1)
  owned_push('RPUSH', redis.call('HGET', KEYS[1], 'cur_key'),
             (string.gsub(redis.call('HGET', KEYS[1], 'msg'), '@@FLEET%-TAG@@', id .. '.' .. n)), KEYS[5])
else
  redis.call('HSET', KEYS[1], 'state', ARGV[2], 'finished_at', ARGV[3])
  pipe_job_ended(KEYS[1], ARGV[2], ARGV[3])
end
if pipe_more then return 'more' end  -- the rest of a large release: release_rest.lua
return 'ok'
