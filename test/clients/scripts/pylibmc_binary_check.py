#!/usr/bin/python3
"""Exercise a cache node with pylibmc (libmemcached) over the BINARY
protocol, optionally with SASL PLAIN; exit non-zero on any wrong result.

usage: pylibmc_binary_check.py HOST:PORT [USER PASSWORD [BADPASSWORD]]

With BADPASSWORD the script first checks that a client with the wrong
password cannot store or read anything.
"""
import sys

import pylibmc


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)


def client(addr, user=None, password=None):
    kw = {}
    if user is not None:
        kw = {"username": user, "password": password}
    return pylibmc.Client([addr], binary=True, behaviors={"cas": True}, **kw)


def main():
    addr = sys.argv[1]
    user = sys.argv[2] if len(sys.argv) > 2 else None
    password = sys.argv[3] if len(sys.argv) > 3 else None
    if len(sys.argv) > 4:
        bad = client(addr, user, sys.argv[4])
        try:
            bad.set("plb:denied", b"x")
        except pylibmc.Error:
            pass
        else:
            check("set with a wrong password raised", False, True)

    mc = client(addr, user, password)
    p = "plb:"
    check("set", mc.set(p + "a", b"alpha"), True)
    check("get", mc.get(p + "a"), b"alpha")
    check("get miss", mc.get(p + "missing"), None)
    check("set int", mc.set(p + "i", 12345), True)
    check("get int", mc.get(p + "i"), 12345)
    check("add existing", mc.add(p + "a", b"x"), False)
    check("add new", mc.add(p + "b", b"beta"), True)
    check("replace", mc.replace(p + "b", b"BETA"), True)
    try:  # over the binary protocol libmemcached reports the miss as NotFound
        got = mc.replace(p + "zz", b"x")
    except pylibmc.NotFound:
        got = False
    check("replace missing", got, False)
    check("append", mc.append(p + "b", b"-end"), True)
    check("prepend", mc.prepend(p + "b", b"start-"), True)
    check("get after append", mc.get(p + "b"), b"start-BETA-end")

    binval = bytes(range(256)) * 40
    check("set binary", mc.set(p + "bin", binval), True)
    check("get binary", mc.get(p + "bin"), binval)

    keys = [p + "m%d" % i for i in range(100)]
    check("set_multi", mc.set_multi({k: k.encode() for k in keys}), [])
    got = mc.get_multi(keys + [p + "nope"])
    check("get_multi count", len(got), 100)
    for k in keys:
        check("get_multi " + k, got[k], k.encode())

    val, cas = mc.gets(p + "a")
    check("gets value", val, b"alpha")
    check("cas", mc.cas(p + "a", b"alpha2", cas), True)
    check("cas stale", mc.cas(p + "a", b"alpha3", cas), False)
    check("after cas", mc.get(p + "a"), b"alpha2")

    check("incr creates nothing", mc.get(p + "n"), None)
    check("set counter", mc.set(p + "n", 10), True)
    check("incr", mc.incr(p + "n", 5), 15)
    check("decr", mc.decr(p + "n", 20), 0)
    try:
        mc.incr(p + "nokey", 1)
    except pylibmc.NotFound:
        pass
    else:
        check("incr missing raised NotFound", False, True)

    check("touch", mc.touch(p + "a", 100), True)
    check("touch missing", mc.touch(p + "nokey", 100), False)
    check("get after touch", mc.get(p + "a"), b"alpha2")

    check("delete", mc.delete(p + "a"), True)
    check("delete missing", mc.delete(p + "a"), False)
    check("get deleted", mc.get(p + "a"), None)
    check("delete_multi", mc.delete_multi(keys[:10]), True)
    check("get deleted multi", mc.get(keys[0]), None)

    mc.flush_all()
    check("get after flush", mc.get(keys[50]), None)
    print("pylibmc binary%s: all checks passed" % (" + SASL" if user else ""))


if __name__ == "__main__":
    main()
