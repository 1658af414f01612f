{{decide_func}}
local h = redis.call('HMGET', KEYS[1], 'v', 'pl', 'r', 'c', 'q:' .. ARGV[7], 'at')
if not h[1] then return {3} end
{{ref_general}}