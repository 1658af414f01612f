
-- count_refusal adds one to the day's refusal count of policy name (the
-- refusal counts' hash <base>rf:<yyyymmdd>) and notes that hash for the
-- worker.
local function count_refusal(now_ms, base, dirty, name)
  local floor = math.floor
  local z = floor(now_ms / 86400000) + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  local rk = base .. 'rf:' .. (y * 10000 + m * 100 + d)
  if redis.call('HINCRBY', rk, name, 1) == 1 then
    redis.call('EXPIRE', rk, 3456000)
  end
  redis.call('ZINCRBY', dirty .. 'rf', 1, rk)
  redis.call('EXPIRE', dirty .. 'rf', 3456000)
end

