{{grants}}
-- settle_grants returns the meter's grants G with a settlement applied
-- (nil: nothing changes). k is what the reservation's decision took:
-- "<included units> <limit> " then "<grant id> <units> " per grant drawn,
-- in draw order; n the estimate, diff actual − estimate, used the
-- counter before the settlement.
--
-- A refund (diff < 0) gives back in the reverse of the order the decision
-- took: first what went beyond the included units and every grant (a soft
-- quota's overage), then the grants, the last drawn first, each up to what
-- it gave, then the included units (the counter's own decrease). A grant
-- no longer in the list (closed and flushed since) gives its part to the
-- included units. A charge beyond the estimate (diff > 0) is taken as a
-- decision takes it, never refused: the included units left first, then
-- the active grants in order, then overage.
local function settle_grants(G, I, k, n, diff, used)
  local inc, lim, rest = string.match(k, '^(%S+) (%S+) (.*)$')
  if not inc then return nil end
  if diff > 0 then
    local free = tonumber(lim) - used
    if free < 0 then free = 0 end
    local beyond = diff - free
    if beyond <= 0 then return nil end
    local t = redis.call('TIME')
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local av = grant_sum(G, now_ms)
    if beyond > av then beyond = av end
    if beyond <= 0 then return nil end
    return grant_take(G, now_ms, beyond)
  end
  local ids, units, drew = {}, {}, 0
  for id, u in string.gmatch(rest, '(%S+) (%S+) ') do
    ids[#ids + 1] = id; units[#units + 1] = tonumber(u)
    drew = drew + tonumber(u)
  end
  -- what the decision took beyond the included units and the grants
  local r = -diff - (n - tonumber(inc) - drew)
  if r <= 0 or drew == 0 then return nil end
  -- each id's remaining (the grants' numbers are stored last drawn first)
  local at, o = {}, #G - 7
  for id in string.gmatch(I or '', '(%S+) ') do
    at[id] = o
    o = o - 24
  end
  local changed = false
  for i = #ids, 1, -1 do
    if r <= 0 then break end
    local give = units[i]
    if give > r then give = r end
    local o = at[ids[i]]
    if o then
      local rem = struct.unpack('<d', G, o)
      G = string.sub(G, 1, o - 1) .. struct.pack('<d', rem + give) .. string.sub(G, o + 8)
      changed = true
    end
    r = r - give
  end
  if changed then return G end
  return nil
end
local r = redis.call('HMGET', KEYS[1], 'n', 'h', 'q', 'm', 'd', 'g', 'k')
if not r[1] then return -1 end
redis.call('DEL', KEYS[1])
local n = tonumber(r[1])
local diff = tonumber(ARGV[1]) - n
if diff ~= 0 and r[2] and r[2] ~= '' then
  local h = r[2]
  local used = redis.call('HGET', h, r[3])
  if used then
    redis.call('HINCRBY', h, r[3], diff)
    if r[7] and r[7] ~= '' then
      -- r[6] is the meter's GN: field; its ids are in GI:
      local gv = redis.call('HMGET', h, r[6], 'GI:' .. string.sub(r[6], 4))
      local G = gv[1]
      if G then
        G = settle_grants(G, gv[2], r[7], n, diff, tonumber(used))
        if G then redis.call('HSET', h, r[6], G) end
      end
    end
  else
    -- the counter is missing (Redis lost the hash): its rebuild adds g,
    -- and the grants are rebuilt from the ledger, which has no draws
    -- this process did not flush
    redis.call('HINCRBY', h, 'g' .. string.sub(r[3], 2), diff)
    if redis.call('PTTL', h) < 0 then redis.call('PEXPIRE', h, 3456000000) end
  end
  -- the counter has unflushed usage now (or a refund): mark it
  redis.call('SADD', r[5], r[4])
  redis.call('EXPIRE', r[5], 3456000)
end
return n
