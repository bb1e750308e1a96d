-- inspect: live holders, and whether ARGV[4] (may be empty) is one of them.
-- Returns {live holder count, 1 if ARGV[4] holds a slot else 0}.
settle()
purge_expired()
promote(nil)
local mine = 0
if ARGV[4] ~= '' and redis.call('ZSCORE', holders, ARGV[4]) then mine = 1 end
return {redis.call('ZCARD', holders), mine}
