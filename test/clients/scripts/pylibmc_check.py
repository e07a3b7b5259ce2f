#!/usr/bin/python3
"""Exercise a cache node with pylibmc (libmemcached); exit non-zero on any
wrong result.

usage: pylibmc_check.py HOST:PORT
"""
import sys

import pylibmc


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)


def main():
    mc = pylibmc.Client([sys.argv[1]], binary=False, behaviors={"cas": True})
    p = "plmc:"

    check("set", mc.set(p + "a", b"alpha"), True)
    check("get", mc.get(p + "a"), b"alpha")
    check("get miss", mc.get(p + "missing"), None)
    check("set str", mc.set(p + "s", "text"), True)
    check("get str", mc.get(p + "s"), "text")
    check("set int", mc.set(p + "i", 12345), True)
    check("get int", mc.get(p + "i"), 12345)
    check("set obj", mc.set(p + "o", {"x": [1, 2, 3]}), True)
    check("get obj", mc.get(p + "o"), {"x": [1, 2, 3]})
    check("add existing", mc.add(p + "a", b"x"), False)
    check("add new", mc.add(p + "b", b"beta"), True)
    check("replace", mc.replace(p + "b", b"BETA"), True)
    check("replace missing", mc.replace(p + "zz", b"x"), False)
    check("append", mc.append(p + "b", b"-end"), True)
    check("prepend", mc.prepend(p + "b", b"start-"), True)
    check("get after append", mc.get(p + "b"), b"start-BETA-end")

    binval = bytes(range(256)) * 10
    check("set binary", mc.set(p + "bin", binval), True)
    check("get binary", mc.get(p + "bin"), binval)

    many = {p + "m%d" % i: ("v%d" % i).encode() for i in range(100)}
    check("set_multi", mc.set_multi(many), [])
    check("get_multi", mc.get_multi(list(many) + [p + "nope"]), many)

    val, cas = mc.gets(p + "a")
    check("gets value", val, b"alpha")
    check("cas ok", mc.cas(p + "a", b"alpha2", cas), True)
    check("cas stale", mc.cas(p + "a", b"alpha3", cas), False)
    check("after cas", mc.get(p + "a"), b"alpha2")

    mc.set(p + "n", 10)
    check("incr", mc.incr(p + "n", 5), 15)
    check("decr", mc.decr(p + "n", 20), 0)
    try:
        mc.incr(p + "nokey", 1)
        check("incr missing raises", False, True)
    except pylibmc.NotFound:
        pass

    check("touch", mc.touch(p + "a", 100), True)
    check("touch missing", mc.touch(p + "nokey", 100), False)

    check("delete", mc.delete(p + "a"), True)
    check("delete missing", mc.delete(p + "a"), False)
    check("get deleted", mc.get(p + "a"), None)
    check("delete_multi", mc.delete_multi([p + "m1", p + "m2"]), True)
    check("after delete_multi", mc.get_multi([p + "m1", p + "m2", p + "m3"]), {p + "m3": b"v3"})

    stats = mc.get_stats()
    check("one server in stats", len(stats), 1)
    check("stats curr_items", "curr_items" in stats[0][1], True)
    check("flush_all", mc.flush_all(), True)
    check("get after flush", mc.get(p + "b"), None)
    print("pylibmc: ok")


main()
