#!/usr/bin/env python3
"""Writes the load benchmark's records as NDJSON: N Items like the engine benchmark's
(price = i mod 100,000, one of 100 artists, a title of two words, a location near Paris)."""
import json
import sys

count = int(sys.argv[1])
out = sys.stdout
words = ["harbour", "sunset", "night", "portrait", "river", "garden", "storm", "city", "sea", "mountain"]
for i in range(count):
    out.write(json.dumps({
        "recordName": f"item-{i}", "recordType": "Item",
        "fields": {
            "price": {"value": i % 100_000, "type": "INT64"},
            "artist": {"value": f"artist{i % 100}", "type": "STRING"},
            "title": {"value": f"{words[i % 10]} {words[(i // 10) % 10]} {i}", "type": "STRING"},
            "location": {"value": {"latitude": 48 + (i % 1000) / 1000, "longitude": 2 + (i % 777) / 777}, "type": "LOCATION"},
        },
    }, separators=(",", ":")))
    out.write("\n")
