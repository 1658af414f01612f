
if $AT and h[1] == $VERSION then
  -- the Loader confirmed this version: young again
  redis.call('HSET', KEYS[1], 'at', $AT)
  h[6] = $AT
end