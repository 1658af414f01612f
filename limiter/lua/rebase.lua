
local sfx = ARGV[1]
local q = tonumber(redis.call('HGET', KEYS[1], 'q:' .. sfx))
local d = tonumber(ARGV[2])
if not q or q >= tonumber(ARGV[3]) or q >= d then return 0 end
redis.call('HSET', KEYS[1], 'q:' .. sfx, d, 'f:' .. sfx, d)
redis.call('HDEL', KEYS[1], 'ci:' .. sfx, 'cn:' .. sfx, 'cs:' .. sfx)
redis.call('HINCRBY', KEYS[1], 'e', 1)
return 1
