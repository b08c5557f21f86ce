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

-- With RATE set (requests/s over all CONNECTIONS), each connection waits a random time between a
-- response and its next request (exponentially distributed, so the requests arrive as a Poisson
-- stream would): the load offered at that rate rather than as fast as the server answers.
local rate = tonumber(os.getenv("RATE") or "")
local connections = tonumber(os.getenv("CONNECTIONS") or "64")
if rate then
  local mean = 1000 * connections / rate
  delay = function()
    return math.floor(-mean * math.log(1 - math.random()))
  end
end
