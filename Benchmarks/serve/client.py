#!/usr/bin/env python3
"""The load benchmark's helper client (standard library only).

  client.py subscribe BASE TOKEN COUNT     COUNT query subscriptions (price == k) owned by TOKEN's user
  client.py courier BASE TOKEN SAMPLES     modify -> web courier latency, SAMPLES times; prints medians and p99

BASE is http://127.0.0.1:PORT/database/1/iCloud.bench/development/public; the device calls go to
/device/1/iCloud.bench/development.
"""
import json
import sys
import threading
import time
import urllib.request


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def subscribe(base, token, count):
    batch = 200
    for start in range(0, count, batch):
        operations = [{"operationType": "create", "subscription": {
            "subscriptionID": f"price-{k}", "subscriptionType": "query",
            "query": {"recordType": "Item", "filterBy": [{"comparator": "EQUALS", "fieldName": "price", "fieldValue": {"value": k}}]},
            "firesOn": ["create", "update"], "notificationInfo": {"shouldSendContentAvailable": True}}}
            for k in range(start, min(start + batch, count))]
        answer = post(f"{base}/subscriptions/modify?ckAPIToken=bench&ckWebAuthToken={token}", {"operations": operations})
        failed = [s for s in answer.get("subscriptions", []) if "serverErrorCode" in s]
        if failed:
            sys.exit(f"subscribe: {failed[0]}")


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def courier(base, token, samples):
    device = base.replace("/database/1/", "/device/1/").rsplit("/", 1)[0]
    created = post(f"{device}/tokens/create?ckAPIToken=bench&ckWebAuthToken={token}", {"apnsEnvironment": "development"})
    url = created["webcourierURL"]
    post(f"{base}/subscriptions/modify?ckAPIToken=bench&ckWebAuthToken={token}", {"operations": [{"operationType": "create", "subscription": {
        "subscriptionID": "courier-probe", "subscriptionType": "query",
        "query": {"recordType": "Probe"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "probe"}}}]})
    latencies = []
    for n in range(samples):
        arrived = {}

        def poll():
            with urllib.request.urlopen(url, timeout=60) as response:
                response.read()
                arrived["at"] = time.monotonic()

        waiter = threading.Thread(target=poll)
        waiter.start()
        time.sleep(0.03)  # the poll is waiting before the modify
        post(f"{base}/records/modify?ckAPIToken=bench&ckWebAuthToken={token}", {"operations": [
            {"operationType": "create", "record": {"recordType": "Probe", "recordName": f"probe-{time.time_ns()}-{n}", "fields": {"n": {"value": n}}}}]})
        answered = time.monotonic()
        waiter.join()
        latencies.append(max(arrived["at"] - answered, 0.0))
    print(f"courier: {samples} pushes, modify response -> notification: median {percentile(latencies, 50) * 1000:.2f} ms, "
          f"p99 {percentile(latencies, 99) * 1000:.2f} ms")


if __name__ == "__main__":
    command, base, token, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    {"subscribe": subscribe, "courier": courier}[command](base, token, count)
