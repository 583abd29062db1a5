-- A bundle a worker kept on disk (the store was down, then the worker restarted) is
-- now stored: record the job succeeded unless it already is. A run of it elsewhere
-- sees 'succeeded' on its next heartbeat and stops, so the work is not done twice.
-- KEYS: job_key, lease_key, running_set   ARGV: job_id, now, artifact_json, result_json
-- Its pipeline's followers are released in the same step (lua/release.lua).
--@@RELEASE@@
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
-- the same adopt again (its reply was lost): the same answer
if state == 'succeeded' and redis.call('HGET', KEYS[1], 'artifact') == ARGV[3] then return 'ok' end
if state == 'succeeded' or state == 'cancelled' then return state end
redis.call('HSET', KEYS[1], 'state', 'succeeded', 'finished_at', ARGV[2], 'artifact', ARGV[3],
           'result', ARGV[4], 'last_error', '',
           'end', 'succeeded', 'end_reason', '', 'end_detail', '')
redis.call('HDEL', KEYS[1], 'token')
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
pipe_job_ended(KEYS[1], 'succeeded', ARGV[2])
if pipe_more then return 'more' end  -- the rest of a large release: release_rest.lua
return 'ok'
