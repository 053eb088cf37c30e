-- wrk script: 16 pipelined GET /index.txt per request batch.
init = function()
  local r = {}
  for i = 1, 16 do r[i] = wrk.format(nil, "/index.txt") end
  req = table.concat(r)
end
request = function() return req end
