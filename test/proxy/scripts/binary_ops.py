#!/usr/bin/env python3
"""Runs a fixed sequence of pylibmc operations over libmemcached's binary
protocol (test/proxy TestProxyProtocols).

usage: binary_ops.py ADDR PREFIX

Prints one line per operation, "name -> result", where result is the
repr of the return value or "raise <Exception>: <message>". CAS values are
printed as "cas" (nonzero) or "cas0": servers number them differently. The
caller runs the same sequence against memcached itself and against the
proxy and compares the lines. Exits 0 unless the script itself breaks.
"""
import sys

import pylibmc

addr, p = sys.argv[1], sys.argv[2]
c = pylibmc.Client([addr], binary=True,
                   behaviors={"cas": True, "_poll_timeout": 15000,
                              "receive_timeout": 15000000, "send_timeout": 15000000,
                              "connect_timeout": 15000})


def norm(v):
    if isinstance(v, dict):
        return "{" + ", ".join("%r: %s" % (k, norm(v[k])) for k in sorted(v)) + "}"
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], int) and not isinstance(v[1], bool):
        return "(%s, %s)" % (norm(v[0]), "cas" if v[1] else "cas0")
    return repr(v)


def op(name, f, *args):
    try:
        r = norm(f(*args))
    except Exception as e:  # the exception is the answer under test
        r = "raise %s: %s" % (type(e).__name__, e)
    print("%s -> %s" % (name, r), flush=True)


k = lambda s: p + s

op("set a", c.set, k("a"), b"alpha")
op("get a", c.get, k("a"))
op("get missing", c.get, k("missing"))
op("set int", c.set, k("int"), 42)
op("get int", c.get, k("int"))
op("set str", c.set, k("str"), "unicode \u00e9")
op("get str", c.get, k("str"))
op("set obj", c.set, k("obj"), {"x": [1, 2]})
op("get obj", c.get, k("obj"))
op("set big", c.set, k("big"), b"B" * 300000)
op("get big len", lambda: len(c.get(k("big"))))
op("set empty", c.set, k("empty"), b"")
op("get empty", c.get, k("empty"))
op("set ttl", c.set, k("ttl"), b"t", 3600)
op("get ttl", c.get, k("ttl"))
op("get_multi", lambda: {kk[len(p):]: v for kk, v in c.get_multi([k("a"), k("missing"), k("int"), k("empty"), k("str")]).items()})
op("get_multi none", c.get_multi, [k("nope1"), k("nope2")])
op("set_multi", c.set_multi, {k("m1"): b"1", k("m2"): b"2", k("m3"): b"3"})
op("get_multi m", lambda: {kk[len(p):]: v for kk, v in c.get_multi([k("m1"), k("m2"), k("m3")]).items()})
op("delete_multi", c.delete_multi, [k("m1"), k("m2"), k("nope")])
op("get_multi after delete", lambda: {kk[len(p):]: v for kk, v in c.get_multi([k("m1"), k("m2"), k("m3")]).items()})
op("delete a", c.delete, k("a"))
op("delete a again", c.delete, k("a"))
op("get a after delete", c.get, k("a"))
op("add new", c.add, k("add"), b"first")
op("add existing", c.add, k("add"), b"second")
op("get add", c.get, k("add"))
op("replace missing", c.replace, k("repl"), b"x")
op("get repl", c.get, k("repl"))
op("replace existing", c.replace, k("add"), b"replaced")
op("get replaced", c.get, k("add"))
op("append", c.append, k("add"), b"+tail")
op("prepend", c.prepend, k("add"), b"head+")
op("get appended", c.get, k("add"))
op("append missing", c.append, k("nope"), b"x")
op("prepend missing", c.prepend, k("nope"), b"x")
op("get nope", c.get, k("nope"))
op("set n", c.set, k("n"), b"10")
op("incr", c.incr, k("n"), 5)
op("decr", c.decr, k("n"), 3)
op("decr below zero", c.decr, k("n"), 100)
op("incr big", c.incr, k("n"), 2 ** 62)
op("incr bigger", c.incr, k("n"), 2 ** 62)
op("incr biggest", c.incr, k("n"), 2 ** 62)
op("incr wrap", c.incr, k("n"), 2 ** 62 + 5)
op("get n", c.get, k("n"))
op("incr missing", c.incr, k("nonum"), 1)
op("decr missing", c.decr, k("nonum"), 1)
op("set text", c.set, k("text"), b"abc")
op("incr non-numeric", c.incr, k("text"), 1)
op("decr non-numeric", c.decr, k("text"), 1)
op("set spaced", c.set, k("sp"), b" 7")
op("incr leading space", c.incr, k("sp"), 1)
op("gets", c.gets, k("add"))
op("gets missing", c.gets, k("missing"))
_, tok = c.gets(k("add"))
op("cas ok", c.cas, k("add"), b"swapped", tok)
op("cas stale", c.cas, k("add"), b"again", tok)
op("get swapped", c.get, k("add"))
op("cas missing", c.cas, k("casmissing"), b"v", tok)
op("touch", c.touch, k("add"), 3600)
op("touch missing", c.touch, k("missing"), 3600)
op("get touched", c.get, k("add"))
op("set long key", c.set, p + "L" * (250 - len(p)), b"long")
op("get long key", c.get, p + "L" * (250 - len(p)))
op("set too long key", c.set, p + "L" * (251 - len(p)), b"x")
