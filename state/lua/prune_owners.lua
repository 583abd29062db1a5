-- The owner lists that hold messages, for a worker's fair-share order; forget the rest.
-- Atomic with every push (they register their list in the same step), so a list is never
-- forgotten while it holds a message.
-- KEYS: owner_lists_set   ARGV: priority steps (e.g. 0..9)
local out = {}
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local held = false
  for i = 1, #ARGV do
    if redis.call('LLEN', member .. '\6\22' .. ARGV[i]) > 0 then held = true; break end
  end
  if held then table.insert(out, member) else redis.call('SREM', KEYS[1], member) end
end
return out
