-- Note on an urgent job's record whom its preemption displaced (tasks.preemption): the
-- entries are appended to its ``preempted`` JSON list in one step, so two hosts preempting for
-- it at once both keep theirs, and a record deleted meanwhile is not made again as a stub.
-- The list is spliced as text: decoding and encoding it would round its times (cjson keeps 14
-- digits). A value that is no JSON list (bad stored text) is replaced by the new entries.
-- KEYS: job_key   ARGV: entries (a JSON list, non-empty)   returns 1, or 0: no record
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local earlier = redis.call('HGET', KEYS[1], 'preempted') or ''
local new = ARGV[1]
if string.match(earlier, '^%[.*%]$') and not string.match(earlier, '^%[%s*%]$') then
  new = string.sub(earlier, 1, -2) .. ',' .. string.sub(new, 2)
end
redis.call('HSET', KEYS[1], 'preempted', new)
return 1
