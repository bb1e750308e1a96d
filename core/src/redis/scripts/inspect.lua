-- inspect: live holders, and whether ARGV[3] (may be empty) is one of them.
-- Returns {live holder count, 1 if ARGV[3] holds a slot else 0}.
settle()
purge_expired()
promote(nil)
local mine = 0
if ARGV[3] ~= '' and redis.call('ZSCORE', holders, ARGV[3]) then mine = 1 end
return {redis.call('ZCARD', holders), mine}
