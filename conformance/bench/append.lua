-- wrk script for the append workloads of conformance/bench.mjs: POSTs a
-- fixed text/plain body to one of NSTREAMS streams, PREFIX0 .. PREFIX<N-1>,
-- rotating (each thread starts at a different stream), every request
-- pre-formatted in init().
--
--   wrk -t2 -c16 -d3 -s append.lua http://127.0.0.1:PORT -- PREFIX NSTREAMS BODY_BYTES
--
-- Every response is checked: a status other than 2xx (or a 2xx without a
-- Stream-Next-Offset) is counted and stops its thread, so that an error
-- is never measured as throughput. done() prints one line
--   WRK_RESULT {json}
-- with the requests, bytes, duration and latency percentiles (µs) wrk saw,
-- the responses that were not 2xx (and the first one's status and body),
-- wrk's socket errors, and how many requests were sent to each stream
-- (`sent`, in stream order), for the caller to check the streams against.

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

-- Per-thread globals (read by done() through thread:get).
ok = 0
bad = 0
first_bad = ""
sent = {}

local reqs, n, i

function init(args)
  local prefix, nstreams, size = args[1], tonumber(args[2]), tonumber(args[3])
  assert(prefix and nstreams and size, "usage: -- PREFIX NSTREAMS BODY_BYTES")
  -- A 256 B body is 255 letters and a newline; other sizes the same shape.
  local body = string.rep("x", size - 1) .. "\n"
  reqs = {}
  for k = 1, nstreams do
    reqs[k] = wrk.format("POST", prefix .. (k - 1), { ["Content-Type"] = "text/plain" }, body)
    sent[k] = 0
  end
  n = nstreams
  i = (tid * 7919) % n -- the streams are visited in the same order by every thread, from apart
end

function request()
  i = i % n + 1
  sent[i] = sent[i] + 1
  return reqs[i]
end

function response(status, headers, body)
  if status >= 200 and status <= 299 and (headers["stream-next-offset"] or headers["Stream-Next-Offset"]) then
    ok = ok + 1
  else
    bad = bad + 1
    if first_bad == "" then
      first_bad = status .. " " .. string.sub(body or "", 1, 300)
      if status >= 200 and status <= 299 then first_bad = first_bad .. " (no Stream-Next-Offset)" end
    end
    wrk.thread:stop()
  end
end

local function jsonstr(s)
  return '"' .. string.gsub(s, '[%c"\\]', " ") .. '"'
end

function done(summary, latency, requests)
  local okall, badall, first = 0, 0, ""
  local sentall = {}
  for _, t in ipairs(threads) do
    okall = okall + t:get("ok")
    badall = badall + t:get("bad")
    local fb = t:get("first_bad")
    if first == "" and fb ~= "" then first = fb end
    for k, v in ipairs(t:get("sent")) do sentall[k] = (sentall[k] or 0) + v end
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"bytes":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d,' ..
    '"ok":%d,"non2xx":%d,"first_bad":%s,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"sent":[%s]}\n',
    summary.requests, summary.bytes, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean, latency.max,
    okall, badall, jsonstr(first), e.connect, e.read, e.write, e.status, e.timeout, table.concat(sentall, ",")))
end
