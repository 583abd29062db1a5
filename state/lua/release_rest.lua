-- The rest of a large release (lua/release.lua): one slice of an upstream's releasing set,
-- its followers released once each, as the end's own script releases its first slice.
-- Run by the worker that recorded the end, right after it, and by the reaper each round,
-- so a release a crash cut short is finished by whoever runs next.
-- KEYS: none (the key names come from the job prefix, as every release's do)
-- ARGV: job_prefix, now, upstream member ('' for the release waiting longest)
-- Returns {released, still in its releasing set, the upstream member ('' when none was left)}
--@@RELEASE@@
return pipe_release_rest(pipe_keys(ARGV[1]), ARGV[3], ARGV[2])
