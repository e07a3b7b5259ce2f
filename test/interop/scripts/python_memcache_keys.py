#!/usr/bin/env python3
"""python-memcached side of test/interop: write or read every key of KEYFILE.

usage: python_memcache_keys.py write|read modulo|rehash SERVERS KEYFILE
SERVERS is "host:port[:weight],..."; a weight becomes ("host:port", w), the
library's own form. python-memcached always rehashes off a server it
cannot connect to; "modulo" and "rehash" differ only in name (the test
lists a dead server for "rehash"). Values are b"v:"+key (flags 0).
read prints every key not found with its value and exits 1 if any.
"""
import sys

import memcache

mode, dist, servers, keyfile = sys.argv[1:5]
with open(keyfile, encoding="utf-8") as f:
    keys = [l.rstrip("\n") for l in f if l.strip()]
hosts = []
for s in servers.split(","):
    p = s.split(":")
    hosts.append(("%s:%s" % (p[0], p[1]), int(p[2])) if len(p) == 3 else s)
c = memcache.Client(hosts, socket_timeout=2)
bad = 0
for k in keys:
    want = ("v:" + k).encode()
    if mode == "write":
        if not c.set(k, want):
            print("set failed:", k)
            bad += 1
    elif c.get(k) != want:
        print("missing:", k)
        bad += 1
print("python-memcached %s %s: %d keys, %d bad" % (mode, dist, len(keys), bad))
sys.exit(1 if bad else 0)
