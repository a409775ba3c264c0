-- wrk script for catchup_768k in conformance/bench.mjs: GETs PATH (a whole
-- stream, ?offset=-1) over and over.
--
--   wrk -t2 -c8 -d3 -s read.lua http://127.0.0.1:PORT -- PATH BODY_BYTES
--
-- Every response is checked: it must be a 200 whose body is BODY_BYTES long
-- (the whole stream in one response: bench.mjs checks that once with Node
-- before it measures, and that the body is the stream's). Anything else is
-- counted and stops its thread, so that an error is never measured as
-- throughput. done() prints one line
--   WRK_RESULT {json}
-- with the requests, bytes (all read, headers included), the response bodies'
-- bytes (`body_bytes`), duration and latency percentiles (µs), the responses
-- that failed the check (and the first one's status and body), and wrk's
-- socket errors.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

ok = 0
bad = 0
body_bytes = 0
first_bad = ""

local want

function init(args)
  want = tonumber(args[2])
  assert(args[1] and want, "usage: -- PATH BODY_BYTES")
  wrk.method = "GET"
  wrk.path = args[1]
end

function response(status, headers, body)
  local got = body and #body or 0
  if status == 200 and got == want then
    ok = ok + 1
    body_bytes = body_bytes + got
  else
    bad = bad + 1
    if first_bad == "" then first_bad = status .. " (" .. got .. " bytes) " .. string.sub(body or "", 1, 200) end
    wrk.thread:stop()
  end
end

local function jsonstr(s)
  return '"' .. string.gsub(s, '[%c"\\]', " ") .. '"'
end

function done(summary, latency, requests)
  local okall, badall, bodyall, first = 0, 0, 0, ""
  for _, t in ipairs(threads) do
    okall = okall + t:get("ok")
    badall = badall + t:get("bad")
    bodyall = bodyall + t:get("body_bytes")
    local fb = t:get("first_bad")
    if first == "" and fb ~= "" then first = fb end
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"bytes":%d,"body_bytes":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d,' ..
    '"ok":%d,"non2xx":%d,"first_bad":%s,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.bytes, bodyall, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean, latency.max,
    okall, badall, jsonstr(first), e.connect, e.read, e.write, e.status, e.timeout))
end
