#!/usr/bin/env python3
"""DuckDB on the engine benchmark's data: the three full scans KQueryBenchmarks times against SQLite.

usage: python3 Benchmarks/duckdb/scans.py [RECORDS] [RUNS]      (pip install duckdb; 1,000,000 and 21)

Regenerates KQueryBenchmarks' records with the same generator (Benchmarks/KQueryBenchmarks/main.swift,
same seed, same draws in the same order), loads them into an in-memory DuckDB table, checks the match
counts, and prints each query's median time over RUNS runs, with DuckDB's default threads (one per
core) and with one thread (KQuery's scans use one). Compare with the benchmark's "column scan" lines
taken in the same period: the two run in different processes, so run them back to back.
"""
import csv
import os
import statistics
import sys
import tempfile
import time

import duckdb

MASK = (1 << 64) - 1
WORDS = ["harbour", "sunset", "night", "portrait", "river", "garden", "storm", "city", "sea", "mountain", "bridge", "light"]
TITLE_WORDS = ["after", "before", "afterglow", "evening", "morning", "study", "view", "still"]
TITLE_COLOURS = ["blue", "red", "green", "gold", "grey", "white"]

QUERIES = [
    ("price > 50000 AND artist == 'artist7'", "SELECT count(*) FROM artwork WHERE price > 50000 AND artist = 'artist7'"),
    ("price > 99900", "SELECT count(*) FROM artwork WHERE price > 99900"),
    # starts_with: case-sensitive, as BEGINSWITH without [c] is.
    ("rating BETWEEN {1, 1.01} AND title BEGINSWITH 'after'",
     "SELECT count(*) FROM artwork WHERE rating BETWEEN 1 AND 1.01 AND starts_with(title, 'after')"),
]


def records(count):
    state = 0x2545F4914F6CDD1D

    def draw():
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        return state >> 11

    for i in range(count):
        price = draw() % 100_001
        artist = f"artist{draw() % 100}"
        description = " ".join(WORDS[draw() % len(WORDS)] for _ in range(6)) + f" w{draw() % 5_000}"
        latitude = 48.0 + (draw() % 2_000_000) / 1_000_000
        longitude = 2.0 + (draw() % 2_000_000) / 1_000_000
        year = 1900 + draw() % 125
        collector = f"collector{draw() % 2_000}"
        rating = (draw() % 501) / 100
        title = TITLE_WORDS[draw() % len(TITLE_WORDS)] + " " + TITLE_COLOURS[draw() % len(TITLE_COLOURS)]
        yield (f"art-{i}", price, artist, description, latitude, longitude, year, collector, rating, title)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    connection = duckdb.connect()
    connection.execute("""CREATE TABLE artwork (recordName VARCHAR PRIMARY KEY, price BIGINT, artist VARCHAR, description VARCHAR,
        latitude DOUBLE, longitude DOUBLE, year BIGINT, collector VARCHAR, rating DOUBLE, title VARCHAR)""")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "artwork.csv")
        with open(path, "w", newline="") as file:
            csv.writer(file).writerows(records(count))
        connection.execute(f"COPY artwork FROM '{path}' (HEADER false)")
    print(f"duckdb {duckdb.__version__}: {count} records loaded in {time.perf_counter() - start:.1f} s")
    threads = connection.execute("SELECT current_setting('threads')").fetchone()[0]
    for label, setting in ((f"{threads} threads", threads), ("1 thread", 1)):
        connection.execute(f"SET threads = {setting}")
        for name, sql in QUERIES:
            matches = connection.execute(sql).fetchone()[0]
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                connection.execute(sql).fetchone()
                times.append(time.perf_counter() - start)
            print(f"DuckDB ({label}) {name}: {matches} matches, median {statistics.median(times) * 1e3:.2f} ms "
                  f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}, {runs} runs)")


if __name__ == "__main__":
    main()
