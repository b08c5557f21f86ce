#!/usr/bin/env python3
"""The load benchmark's helper client (standard library only).

  client.py subscribe BASE TOKEN COUNT     COUNT query subscriptions (price == k) owned by TOKEN's user
  client.py courier BASE TOKEN SAMPLES     modify -> web courier latency, SAMPLES times; prints medians and p99
  client.py nodes BASE BASE_B TOKEN SAMPLES  the same across two nodes: each modify through BASE, the push
                                           taken on BASE_B, by a long poll and then by a WebSocket stream
  client.py idle BASE TOKEN COUNT SECONDS  COUNT web courier clients of TOKEN's user long-polling BASE's
                                           server for SECONDS (a user nothing is pushed to: load, not pushes)

BASE is http://127.0.0.1:PORT/database/1/iCloud.bench/development/public; the device calls go to
/device/1/iCloud.bench/development.
"""
import base64
import json
import os
import queue
import socket
import sys
import threading
import time
import urllib.parse
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


def probe_subscription(base, token):
    """A query subscription on Probe records owned by TOKEN's user, and a web courier URL for it."""
    device = base.replace("/database/1/", "/device/1/").rsplit("/", 1)[0]
    created = post(f"{device}/tokens/create?ckAPIToken=bench&ckWebAuthToken={token}", {"apnsEnvironment": "development"})
    post(f"{base}/subscriptions/modify?ckAPIToken=bench&ckWebAuthToken={token}", {"operations": [{"operationType": "create", "subscription": {
        "subscriptionID": "courier-probe", "subscriptionType": "query",
        "query": {"recordType": "Probe"}, "firesOn": ["create"], "notificationInfo": {"alertBody": "probe"}}}]})
    return created["webcourierURL"]


def create_probe(base, token, n):
    """Creates one Probe record through BASE; returns when its answer has arrived."""
    post(f"{base}/records/modify?ckAPIToken=bench&ckWebAuthToken={token}", {"operations": [
        {"operationType": "create", "record": {"recordType": "Probe", "recordName": f"probe-{time.time_ns()}-{n}", "fields": {"n": {"value": n}}}}]})
    return time.monotonic()


def report(label, latencies):
    print(f"{label}: {len(latencies)} pushes, modify response -> notification: median {percentile(latencies, 50) * 1000:.2f} ms, "
          f"p99 {percentile(latencies, 99) * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms")


def poll_latencies(modify_base, url, token, samples):
    """Each sample: a long poll waits on URL's server, a Probe is created through MODIFY_BASE."""
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
        answered = create_probe(modify_base, token, n)
        waiter.join()
        if "at" not in arrived:
            sys.exit("a long poll ended without the push")
        latencies.append(max(arrived["at"] - answered, 0.0))
    return latencies


class Stream:
    """The web courier's WebSocket (`/aps/stream`): a minimal RFC 6455 client reading text frames."""

    def __init__(self, courier_url):
        parts = urllib.parse.urlsplit(courier_url)
        self.socket = socket.create_connection((parts.hostname, parts.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.socket.sendall((f"GET {parts.path}/stream?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                             f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                             "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.receive()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            sys.exit(f"the stream was refused: {head.decode(errors='replace')}")

    def receive(self):
        data = self.socket.recv(65536)
        if not data:
            raise EOFError("the stream closed")
        return data

    def take(self, count):
        while len(self.buffer) < count:
            self.buffer += self.receive()
        taken, self.buffer = self.buffer[:count], self.buffer[count:]
        return taken

    def send(self, opcode, payload):
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.socket.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)  # payloads under 126 bytes

    def text(self):
        """The next text frame's payload (answering pings on the way)."""
        while True:
            first, second = self.take(2)
            length = second & 0x7F
            if length == 126:
                length = int.from_bytes(self.take(2), "big")
            elif length == 127:
                length = int.from_bytes(self.take(8), "big")
            payload = self.take(length)
            opcode = first & 0x0F
            if opcode == 1:
                return payload.decode()
            if opcode == 9:
                self.send(0xA, payload)
            elif opcode == 8:
                raise EOFError("the stream closed")


def stream_latencies(modify_base, url, token, samples):
    """One WebSocket stream on URL's server hears every push; a Probe at a time through MODIFY_BASE."""
    stream = Stream(url)
    heard = queue.Queue()

    def listen():
        try:
            while True:
                stream.text()
                heard.put(time.monotonic())
        except (EOFError, OSError):
            heard.put(None)

    threading.Thread(target=listen, daemon=True).start()
    time.sleep(0.2)  # the stream is open on the server before the first modify
    latencies = []
    for n in range(samples):
        answered = create_probe(modify_base, token, n)
        try:
            arrived = heard.get(timeout=30)
        except queue.Empty:
            sys.exit("no push on the stream within 30 s")
        if arrived is None:
            sys.exit("the stream closed")
        latencies.append(max(arrived - answered, 0.0))
    stream.socket.close()
    return latencies


def idle(base, token, count, seconds):
    device = base.replace("/database/1/", "/device/1/").rsplit("/", 1)[0]
    urls = [post(f"{device}/tokens/create?ckAPIToken=bench&ckWebAuthToken={token}", {"apnsEnvironment": "development"})["webcourierURL"]
            for _ in range(count)]
    end = time.monotonic() + seconds
    answered = []

    def hold(url):
        while time.monotonic() < end:
            with urllib.request.urlopen(url, timeout=120) as response:
                response.read()
                answered.append(response.status)

    threads = [threading.Thread(target=hold, args=(url,), daemon=True) for url in urls]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    pushes = sum(1 for status in answered if status == 200)
    print(f"idle: {count} polls held {seconds} s, {len(answered)} answered ({pushes} with a push)")


def courier(base, token, samples):
    report("courier", poll_latencies(base, probe_subscription(base, token), token, samples))


def nodes(base, base_b, token, samples):
    url = probe_subscription(base_b, token)  # the courier URL names node B
    report("node A's modify -> long poll on node B", poll_latencies(base, url, token, samples))
    report("node A's modify -> WebSocket stream on node B", stream_latencies(base, url, token, samples))


if __name__ == "__main__":
    if sys.argv[1] == "nodes":
        nodes(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "idle":
        idle(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        command, base, token, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        {"subscribe": subscribe, "courier": courier}[command](base, token, count)
