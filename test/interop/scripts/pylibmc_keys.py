#!/usr/bin/env python3
"""pylibmc side of test/interop: write or read every key of KEYFILE.

usage: pylibmc_keys.py write|read ketama|oaat SERVERS KEYFILE
SERVERS is "host:port[:weight],..." (pylibmc's own syntax). "ketama" sets
the ketama_weighted behavior (MD5, weighted continuum); "oaat" keeps
libmemcached's defaults (modula, one-at-a-time hash). Values are b"v:"+key.
read prints every key not found with its value and exits 1 if any.
"""
import sys

import pylibmc

mode, dist, servers, keyfile = sys.argv[1:5]
with open(keyfile, encoding="utf-8") as f:
    keys = [l.rstrip("\n") for l in f if l.strip()]
behaviors = {"ketama_weighted": True} if dist == "ketama" else {}
c = pylibmc.Client(servers.split(","), behaviors=behaviors)
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
print("pylibmc %s %s: %d keys, %d bad" % (mode, dist, len(keys), bad))
sys.exit(1 if bad else 0)
