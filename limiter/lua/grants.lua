-- The tenant's grants of meter m, from the state hash's list G (see
-- keyspace.GrantsField): the fields and remaining units of the active ones
-- by Redis's clock, in draw order, their sum, and the ms until the
-- earliest pending one takes effect (false: none). false alone when an
-- active grant has no remaining in Redis (it must be rebuilt first).
local function grant_read(h, G, m, now_ms)
  local fs, n, pend = {}, 0, false
  for id, gm, eff, exp in string.gmatch(G, '(%S+) (%S+) (%S+) (%S+) ') do
    if gm == m then
      eff, exp = tonumber(eff), tonumber(exp)
      if exp == 0 or now_ms < exp then
        if now_ms >= eff then
          n = n + 1; fs[n] = 'k:' .. id
        elseif (exp == 0 or eff < exp) and (not pend or eff - now_ms < pend) then
          pend = eff - now_ms
        end
      end
    end
  end
  local vs, avail = {}, 0
  if n > 0 then
    local v = redis.call('HMGET', h, unpack(fs))
    for i = 1, n do
      local x = tonumber(v[i])
      if not x then return false end
      vs[i] = x; avail = avail + x
    end
  end
  return fs, vs, avail, pend
end
-- grant_take appends to w the field, value pairs that draw d units from
-- the grants grant_read found, in order.
local function grant_take(fs, vs, d, w)
  local i = 1
  while d > 0 do
    local x = vs[i]
    if x > 0 then
      local t = x
      if t > d then t = d end
      w[#w + 1] = fs[i]; w[#w + 1] = string.format('%d', x - t)
      d = d - t
    end
    i = i + 1
  end
  return w
end
