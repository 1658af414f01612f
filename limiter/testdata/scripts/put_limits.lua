
local v = tonumber(redis.call('HGET', KEYS[1], 'v'))
if v and v > tonumber(ARGV[1]) then return 0 end
local raw = redis.call('GET', KEYS[2])
if raw then
  local ok, obj = pcall(cjson.decode, raw)
  if ok and type(obj) == 'table' and tonumber(obj['version']) ~= tonumber(ARGV[1]) then return 0 end
end
redis.call('DEL', KEYS[1])
-- a tenant with grants has no limits hash: decided from its snapshot,
-- whose plan draws them (keyspace.Keys.PutGrants deletes it too)
if redis.call('HEXISTS', KEYS[3], 'G') == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
