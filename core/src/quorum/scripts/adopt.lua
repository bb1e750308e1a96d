-- adopt: end the restart guard of a node that is new rather than restarted.
-- A node cannot tell the two apart; its client can: when every node of the
-- lock is inside its guard window at once, none remembers any grant, so
-- there is no lease to protect (a new deployment, or every node restarted
-- together: then every holder's next refresh finds its grants gone).
-- KEYS[1] alive: hash, see guard.lua
-- Returns 1 when the guard ended, 0 when the marker was gone (restarted
-- again since: it stays guarded).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'since', 0)
return 1
