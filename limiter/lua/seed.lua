
local sfx = ARGV[1]
local r = redis.call('HMGET', KEYS[1], 'q:' .. sfx, 'e', 'g:' .. sfx, 'x')
if r[1] then return 0 end
if (tonumber(r[2]) or 0) ~= tonumber(ARGV[4]) then return -1 end
local d = tonumber(ARGV[2])
local g = tonumber(r[3]) or 0
redis.call('HSET', KEYS[1], 'q:' .. sfx, d + g, 'f:' .. sfx, d)
redis.call('HDEL', KEYS[1], 'ci:' .. sfx, 'cn:' .. sfx, 'g:' .. sfx, 'cs:' .. sfx)
if g ~= 0 then
  redis.call('SADD', ARGV[6], ARGV[5])
  redis.call('EXPIRE', ARGV[6], 3456000)
end
local e = tonumber(ARGV[3])
if e > (tonumber(r[4]) or 0) then
  redis.call('HSET', KEYS[1], 'x', e)
  redis.call('PEXPIREAT', KEYS[1], e)
end
return 1
