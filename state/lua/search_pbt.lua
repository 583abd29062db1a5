-- A PBT member's steps (state/search/pbt.py), each fenced by the member's run token as the
-- job record's writes are: only the run that owns the member's job writes, so a run taken over
-- (a partition, a worker thought dead) never records a boundary or an exploit.
--
-- 'start'    a run of the member starts: its member hash exists (its first segment is its
--            trial's values); 'waiting' becomes 'training'. Returns {'ok', pending}: the
--            exploit decided and not yet applied ('' when none), which this run applies first.
-- 'metric'   records the member's metric at a boundary before it decides: of two members that
--            reach a boundary at once, the one that reads the population later sees the other.
-- 'boundary' records the member's metric at a boundary, and the decision taken there, once:
--            a replay of the step (a resumed run, a retry after a lost reply) keeps the newer
--            metric but gets the decision first recorded back. Returns {'new' | 'decided', json}.
-- 'apply'    an exploit decided at `step`, once: the member's job gets its new spec, message
--            and values and the donor's checkpoint (copied to the member's own key first), the
--            exploit and the new segment are appended. The job is still this run's: the caller
--            then requeues it (lua/finish.lua, which pushes the new message to `pri_key`, the
--            list of its step's priority: members behind go first); a crash between
--            the two leaves it running under a dead token, and whoever hands it on pushes the
--            new message the same way. Returns 'ok', 'applied' (once already), 'undecided' (no
--            exploit recorded at that step: Redis lost it) or 'stale'.
-- 'void'     an exploit decided at `step` that cannot be applied (its donor's checkpoint is
--            gone: the donor ended meanwhile): recorded as `<step>:void` -> the reason, and the
--            member goes on from its own checkpoint; never applied later.
-- 'pause'    the member yields its host to members behind it: the caller requeues it to
--            `pri_key` (a list served after theirs); it waits to resume from `resume_step`.
-- 'done'     the member reported its last step.
-- KEYS: job_key, member_key, decided_key, trial_key, bounds_key, schedule_key, exploits_key
-- ARGV: op, token, now, then
--   start:    values_json (the run's values: the member's first segment when it has none)
--   metric:   step, value, values_json
--   boundary: step, value, decision_json, exploit ('1' or '0'), values_json
--   apply:    step, exploit_json, checkpoint_json, spec_json, msg, params_json, values_json,
--             segment_json, resume_step, pri_key
--   pause:    resume_step, pri_key
--   void:     step, reason
--   done:     -
local op, token, now = ARGV[1], ARGV[2], ARGV[3]
local jk, mk, dk, tk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owns = redis.call('HGET', jk, 'state') == 'running' and redis.call('HGET', jk, 'token') == token

if op == 'apply' and redis.call('HEXISTS', dk, ARGV[4] .. ':applied') == 1 then return 'applied' end
if op == 'apply' and redis.call('HEXISTS', dk, ARGV[4] .. ':void') == 1 then return 'void' end
if not owns then
  if op == 'start' or op == 'boundary' then return {'stale', ''} end
  if op == 'metric' then return 'stale' end
  return 'stale'
end

local function first_segment(values)
  if redis.call('LLEN', KEYS[6]) > 0 then return end
  redis.call('RPUSH', KEYS[6], '{"step": 0, "values": ' .. values .. ', "donor": null, "donor_step": null, "at": ' .. now .. '}')
  redis.call('HSET', mk, 'values', values)
end

if op == 'start' then
  first_segment(ARGV[4])
  local phase = redis.call('HGET', mk, 'phase')
  if phase == 'waiting' or not phase then
    redis.call('HSET', mk, 'phase', 'training', 'since', now)
    redis.call('HDEL', mk, 'resume_step')
  end
  if phase == 'exploiting' then return {'ok', redis.call('HGET', mk, 'pending') or ''} end
  return {'ok', ''}
end

local function metric(step, value)
  redis.call('HSET', KEYS[5], step, value)
  if tonumber(step) >= tonumber(redis.call('HGET', mk, 'step') or '-1') then
    redis.call('HSET', mk, 'step', step, 'value', value)
  end
end

if op == 'metric' then
  first_segment(ARGV[6])
  metric(ARGV[4], ARGV[5])
  return 'ok'
end

if op == 'boundary' then
  first_segment(ARGV[8])
  local step, value = ARGV[4], ARGV[5]
  metric(step, value)
  local earlier = redis.call('HGET', dk, step)
  if earlier then return {'decided', earlier} end
  redis.call('HSET', dk, step, ARGV[6])
  if ARGV[7] == '1' then
    redis.call('HSET', mk, 'phase', 'exploiting', 'pending', ARGV[6], 'since', now)
  end
  return {'new', ARGV[6]}
end

if op == 'apply' then
  local step = ARGV[4]
  local decided = redis.call('HGET', dk, step)
  if not decided or cjson.decode(decided).kind ~= 'exploit' then return 'undecided' end
  local old = redis.call('HGET', jk, 'checkpoint') or ''
  redis.call('HSET', jk, 'checkpoint', ARGV[6], 'checkpoint_prev', old, 'spec', ARGV[7],
             'pri_msg', ARGV[8], 'params', ARGV[9], 'pri_key', ARGV[13])
  redis.call('HSET', tk, 'params', ARGV[9])
  redis.call('HSET', mk, 'phase', 'waiting', 'values', ARGV[10], 'resume_step', ARGV[12], 'since', now)
  redis.call('HDEL', mk, 'pending')
  redis.call('HINCRBY', mk, 'exploits', 1)
  redis.call('RPUSH', KEYS[6], ARGV[11])
  redis.call('RPUSH', KEYS[7], ARGV[5])
  redis.call('HSET', dk, step .. ':applied', now)
  return 'ok'
end

if op == 'void' then
  redis.call('HSET', dk, ARGV[4] .. ':void', ARGV[5])
  redis.call('HSET', mk, 'phase', 'training', 'since', now)
  redis.call('HDEL', mk, 'pending')
  return 'ok'
end

if op == 'pause' then
  redis.call('HSET', jk, 'pri_key', ARGV[5])
  redis.call('HSET', mk, 'phase', 'waiting', 'resume_step', ARGV[4], 'since', now)
  return 'ok'
end

if op == 'done' then
  redis.call('HSET', mk, 'phase', 'done', 'since', now)
  redis.call('HDEL', mk, 'pending')
  return 'ok'
end
return redis.error_reply('search_pbt: unknown op ' .. tostring(op))
