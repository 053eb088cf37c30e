-- wrk script: HTTP/1.1 pipelining, DEPTH requests for one path sent in each write.
-- Usage: wrk ... -s pipeline.lua http://HOST:PORT -- PATH DEPTH
-- wrk counts the requests in the returned buffer and expects as many responses.

dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "report.lua")

local batch

function init(args)
   batch = string.rep(wrk.format(nil, args[1]), tonumber(args[2]))
end

function request()
   return batch
end
