-- wrk script for bench/cluster/run: the load through HAProxy during a rolling deploy.
-- Usage: wrk -t1 ... -s load.lua http://127.0.0.1:PORT -- PATH[,PATH...]
--
-- Cycles over the given paths and, for every response, reads the site version from the
-- `X-Site-Version` header (set by the site's `_headers`) and from the `site-version:N`
-- marker every page body carries, then counts: responses per version, non-200 statuses,
-- responses whose header and body disagree (a torn response: headers of one pack, body of
-- another), and the wall-clock time (CLOCK_REALTIME, the clock of bash's $EPOCHREALTIME
-- in bench/cluster/run) of the first v2 and the last v1 response, plus a per-second
-- timeline.
-- done() prints one JSON line, CLUSTER_RESULT {...}, for bench/cluster/report.py.
--
-- Defining response() makes wrk hand every response to Lua (slower than its static fast
-- path); the bench needs it, and the same client runs for both rollouts.

local ffi = require("ffi")
ffi.cdef [[
   typedef struct { long tv_sec; long tv_nsec; } kiln_timespec;
   int clock_gettime(int clk_id, kiln_timespec *tp);
]]
local ts = ffi.new("kiln_timespec")
local CLOCK_REALTIME = 0

local function now()
   ffi.C.clock_gettime(CLOCK_REALTIME, ts)
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

-- Per thread (each wrk thread has its own Lua state; done() gathers them with
-- thread:get). One flat table of numbers, because wrk's thread:get crashes (segfault,
-- wrk 4.1.0) on a table holding tables. Keys:
--   "v:N" responses of version N, "s:CODE" responses with status CODE other than 200,
--   "torn", "unversioned" (no X-Site-Version), "first:N" / "last:N" the time of the
--   first / last response of version N, "t:SECOND:N" responses of version N in that
--   second since "start" (the thread's start).
local requests, n_requests, next_request = {}, 0, 0
stats = { torn = 0, unversioned = 0, start = 0 }

local function add(key, n)
   stats[key] = (stats[key] or 0) + n
end

function init(args)
   for path in string.gmatch(args[1] or "/", "[^,]+") do
      n_requests = n_requests + 1
      requests[n_requests] = wrk.format(nil, path)
   end
   stats.start = now()
end

function request()
   next_request = next_request % n_requests + 1
   return requests[next_request]
end

function response(status, headers, body)
   local t = now()
   local version = headers["X-Site-Version"] or headers["x-site-version"]
   local marker = body and string.match(body, "site%-version:(%d+)")
   if status ~= 200 then
      add("s:" .. status, 1)
   end
   if version == nil then
      add("unversioned", 1)
      return
   end
   if marker ~= nil and marker ~= version then
      add("torn", 1)
   end
   add("v:" .. version, 1)
   if stats["first:" .. version] == nil then stats["first:" .. version] = t end
   stats["last:" .. version] = t
   add("t:" .. math.floor(t - stats.start) .. ":" .. version, 1)
end

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

-- JSON object of a flat table of numbers.
local function json(flat)
   local parts = {}
   for k, v in pairs(flat) do
      table.insert(parts, string.format('"%s":%.6f', k, v))
   end
   return "{" .. table.concat(parts, ",") .. "}"
end

function done(summary, latency, _)
   local per_thread = {}
   for _, thread in ipairs(threads) do
      table.insert(per_thread, json(thread:get("stats")))
   end
   local errors = summary.errors
   io.write(string.format(
      'CLUSTER_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
      '"status_errors":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,' ..
      '"max_us":%d,"mean_us":%.1f,"threads":[%s]}\n',
      summary.requests, summary.duration, summary.bytes,
      errors.connect, errors.read, errors.write, errors.timeout, errors.status,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean, table.concat(per_thread, ",")))
end
