{{decide_func}}
local h = redis.call('HMGET', KEYS[1], 'v', 'pl', 'r', 'c', 'q:' .. ARGV[7], 'at', 'w')
if not h[1] then return {3} end
local hw = h[7]
{{ref_general}}