-- wrk script: print wrk's own run summary as one JSON line for bench/lib/measure.py.
-- Used alone for fixed-path cases (wrk keeps its fast static request) and loaded by
-- the other scripts. `errors.status` is wrk's count of responses with status > 399:
-- the harness reports it as the run's non-2xx count (3xx are ruled out by the checks
-- made before each run).

function done(summary, latency, requests)
   local errors = summary.errors
   io.write(string.format(
      'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,' ..
      '"non2xx":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,' ..
      '"max_us":%d,"mean_us":%.1f}\n',
      summary.requests, summary.duration, summary.bytes,
      errors.connect, errors.read, errors.write, errors.timeout, errors.status,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean))
end
