#!/usr/bin/python3
"""Exercise a cache node with pymemcache; exit non-zero on any wrong result.

usage: pymemcache_check.py HOST:PORT
"""
import sys

from pymemcache.client.base import Client


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    c = Client((host, int(port)), connect_timeout=5, timeout=5)
    p = "pymc:"

    check("set", c.set(p + "a", b"alpha", noreply=False), True)
    check("get", c.get(p + "a"), b"alpha")
    check("get miss", c.get(p + "missing"), None)
    check("set flags", c.set(p + "f", b"v", expire=0, noreply=False, flags=42), True)
    check("get flags", c.get(p + "f", default=None), b"v")
    check("add existing", c.add(p + "a", b"x", noreply=False), False)
    check("add new", c.add(p + "b", b"beta", noreply=False), True)
    check("replace missing", c.replace(p + "zz", b"x", noreply=False), False)
    check("replace", c.replace(p + "b", b"BETA", noreply=False), True)
    check("append", c.append(p + "b", b"-end", noreply=False), True)
    check("prepend", c.prepend(p + "b", b"start-", noreply=False), True)
    check("get after append/prepend", c.get(p + "b"), b"start-BETA-end")

    binval = bytes(range(256)) + b"\r\nEND\r\n"
    check("set binary", c.set(p + "bin", binval, noreply=False), True)
    check("get binary", c.get(p + "bin"), binval)
    big = b"x" * 500000
    check("set big", c.set(p + "big", big, noreply=False), True)
    check("get big", c.get(p + "big"), big)

    many = {p + "m%d" % i: ("value-%d" % i).encode() for i in range(100)}
    check("set_many", c.set_many(many, noreply=False), [])
    got = c.get_many(list(many) + [p + "nope"])
    check("get_many", got, many)

    val, cas = c.gets(p + "a")
    check("gets value", val, b"alpha")
    check("cas ok", c.cas(p + "a", b"alpha2", cas, noreply=False), True)
    check("cas stale", c.cas(p + "a", b"alpha3", cas, noreply=False), False)
    check("cas missing", c.cas(p + "nokey", b"x", cas, noreply=False), None)
    check("after cas", c.get(p + "a"), b"alpha2")
    res = c.gets_many([p + "a", p + "b"])
    check("gets_many keys", sorted(res), [p + "a", p + "b"])
    check("gets_many value", res[p + "a"][0], b"alpha2")

    c.set(p + "n", b"10", noreply=False)
    check("incr", c.incr(p + "n", 5, noreply=False), 15)
    check("decr", c.decr(p + "n", 20, noreply=False), 0)
    check("incr missing", c.incr(p + "nokey", 1, noreply=False), None)
    c.set(p + "n", b"18446744073709551615", noreply=False)
    check("incr wrap", c.incr(p + "n", 2, noreply=False), 1)
    c.set(p + "n", b"100", noreply=False)
    check("decr shrink", c.decr(p + "n", 1, noreply=False), 99)
    check("get after shrink", c.get(p + "n").strip(), b"99")

    check("touch", c.touch(p + "a", 100, noreply=False), True)
    check("touch missing", c.touch(p + "nokey", 100, noreply=False), False)
    check("gat", c.gat(p + "a", 200) if hasattr(c, "gat") else b"alpha2", b"alpha2")

    check("delete", c.delete(p + "a", noreply=False), True)
    check("delete missing", c.delete(p + "a", noreply=False), False)
    check("get deleted", c.get(p + "a"), None)

    check("noreply set", c.set(p + "q", b"quiet", noreply=True), True)
    check("get after noreply", c.get(p + "q"), b"quiet")

    ver = c.version()
    check("version nonempty", bool(ver), True)
    st = c.stats()
    check("stats has cmd_get", b"cmd_get" in st or "cmd_get" in st, True)
    check("flush_all", c.flush_all(noreply=False), True)
    check("get after flush", c.get(p + "b"), None)
    c.close()
    print("pymemcache: ok")


main()
