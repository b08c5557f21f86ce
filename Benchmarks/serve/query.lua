-- records/query answered by the price index: price == a random value (10 records each).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = string.format(
    '{"query":{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"price","fieldValue":{"value":%d}}]},"resultsLimit":10}',
    math.random(0, 99999))
  return wrk.format(nil, nil, nil, body)
end
