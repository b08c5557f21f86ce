-- A durable single-record records/modify: a new Item whose price matches exactly one of the
-- subscriptions (price == k for every k below SUBSCRIPTIONS), so each modify queues one push.
local threads = {}
local counter = 0
local subscriptions = tonumber(os.getenv("SUBSCRIPTIONS") or "100000")

setup = function(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

init = function(args)
  math.randomseed(os.time() + id * 7919)
end

request = function()
  counter = counter + 1
  local k = math.random(0, subscriptions - 1)
  local body = string.format(
    '{"operations":[{"operationType":"create","record":{"recordType":"Item","recordName":"load-%d-%d-%d","fields":{"price":{"value":%d},"artist":{"value":"artist%d"}}}}]}',
    os.time(), id, counter, k, k % 100)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end

-- With RATE set (requests/s over all THREADS, default 2), requests arrive open-loop: each thread
-- draws its arrival times from a Poisson stream of RATE / THREADS a second, read on the monotonic
-- clock, and a connection that is free sends at the next arrival (at once when it is past). The
-- offered load is then RATE whatever the latency; a closed loop (wait, then send) offered less,
-- 64 connections at RATE 1000 sent 880/s with 8 ms responses.
local rate = tonumber(os.getenv("RATE") or "")
if rate then
  local ffi = require("ffi")
  ffi.cdef[[
    typedef struct { long tv_sec; long tv_nsec; } kquery_timespec;
    int clock_gettime(int clock, kquery_timespec *time);
  ]]
  local now = ffi.new("kquery_timespec")
  local function milliseconds()
    ffi.C.clock_gettime(1, now)   -- CLOCK_MONOTONIC
    return tonumber(now.tv_sec) * 1000 + tonumber(now.tv_nsec) / 1e6
  end
  local mean = 1000 * tonumber(os.getenv("THREADS") or "2") / rate   -- ms between a thread's arrivals
  local arrival = nil
  delay = function()
    local t = milliseconds()
    arrival = (arrival or t) - mean * math.log(1 - math.random())
    return math.max(0, math.floor(arrival - t))
  end
end
