-- Run publish.lua once per job, for a batch of jobs, in one script call.
-- Each job stays one atomic step (the whole batch is, in fact), and a batch costs one
-- round trip and one command instead of one per job. publish.lua's text is spliced in
-- below at load time (state/scripts.py), so the per-job logic lives in one place.
-- ARGV[1]: JSON list of [keys, argv] pairs, exactly publish.lua's KEYS and ARGV per job.
--@@RELEASE@@
local function publish_one(KEYS, ARGV)
--@@PUBLISH@@
end
local out = {}
for i, job in ipairs(cjson.decode(ARGV[1])) do out[i] = publish_one(job[1], job[2]) end
return out
