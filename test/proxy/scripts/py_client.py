#!/usr/bin/env python3
"""Drives a memcached client library through the proxy (test/proxy).

usage: py_client.py pymemcache|pylibmc ADDR SECONDS PREFIX

First a functional pass (set, get, get_multi in order, delete, incr,
decr, add, replace, append, cas); then a load loop for SECONDS: one writer
per key set, each value a new version; every read must return the last
acknowledged version. Prints one line:
  LIB functional=ok|FAIL:why ops=N errors=N stale=N maxlat_ms=N
then up to 10 notes, then for each stale read "LOST T": T (unix seconds)
is when the write it missed was acknowledged, for the caller to judge
(a failover loses the writes inside the replication lag), for each
failed write "ERR T", and for each miss of a key whose last write failed
"UNSURE T": under --sync-replication a read of a write not yet on its
replicas is refused (internal/server, syncReadUnsure), which the proxy
sends again and, past its retries, answers with an error; a library that
gives None for an error as for a miss (Cache::Memcached does) shows it as
a miss, which tells nothing lost. Exits 1 when the functional pass
failed or a request got an error.
"""
import sys
import time

lib, addr, seconds, prefix = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
host, port = addr.rsplit(":", 1)

if lib == "pymemcache":
    from pymemcache.client.base import Client
    c = Client((host, int(port)), connect_timeout=15, timeout=15)
    get_multi = c.get_many
    def gets(k):
        return c.gets(k)
    def cas(k, v, token):
        return c.cas(k, v, token)
    def add(k, v):
        return c.add(k, v, noreply=False)
    def replace(k, v):
        return c.replace(k, v, noreply=False)
    def append(k, v):
        return c.append(k, v, noreply=False)
    def setv(k, v):
        return c.set(k, v, noreply=False)
    def delete(k):
        return c.delete(k, noreply=False)
else:
    import pylibmc
    c = pylibmc.Client([addr], behaviors={"cas": True, "_poll_timeout": 15000,
                                          "receive_timeout": 15000000, "send_timeout": 15000000,
                                          "connect_timeout": 15000})
    get_multi = c.get_multi
    def gets(k):
        return c.gets(k)
    def cas(k, v, token):
        return c.cas(k, v, token)
    def add(k, v):
        return c.add(k, v)
    def replace(k, v):
        return c.replace(k, v)
    def append(k, v):
        return c.append(k, v)
    def setv(k, v):
        return c.set(k, v)
    def delete(k):
        return c.delete(k)

def b(x):
    return x if isinstance(x, bytes) else str(x).encode()

def functional():
    k = prefix + ":f"
    assert setv(k, b"v1"), "set"
    assert b(c.get(k)) == b"v1", "get"
    keys = [prefix + ":m%d" % i for i in range(30)]
    for i, kk in enumerate(keys):
        assert setv(kk, b"m%d" % i), "set m"
    got = get_multi(keys + [prefix + ":absent"])
    assert len(got) == 30 and all(b(got[kk]) == b"m%d" % i for i, kk in enumerate(keys)), "get_multi"
    assert delete(k), "delete"
    assert c.get(k) is None, "get after delete"
    assert not replace(k, b"x"), "replace missing"
    assert add(k, b"1"), "add"
    assert not add(k, b"2"), "add existing"
    assert append(k, b"0"), "append"
    assert c.incr(k, 5) == 15, "incr"
    assert c.decr(k, 20) == 0, "decr floor"
    v, token = gets(k)
    assert b(v).strip() == b"0", "gets"  # decr pads in place, as memcached
    assert cas(k, b"7", token), "cas"
    assert not cas(k, b"8", token), "cas stale"
    assert b(c.get(k)) == b"7", "get after cas"

func = "ok"
try:
    functional()
except Exception as e:  # noqa
    func = "FAIL:%r" % (e,)

acked = {}
acked_at = {}
maybe = {}  # a write that failed may still have been applied (its replication timed out)
err_at = []
unsure_at = []
lost = []
keys = [prefix + ":k%d" % i for i in range(100)]
ops = errors = stale = 0
maxlat = 0.0
end = time.time() + seconds
i = 0
notes = []
while time.time() < end:
    k = keys[i % len(keys)]
    i += 1
    t0 = time.time()
    try:
        v = b"%s:%d" % (k.encode(), i)
        maybe[k] = v
        if setv(k, v):
            acked[k] = v
            acked_at[k] = time.time()
            del maybe[k]
        else:
            errors += 1
            err_at.append(time.time())
            notes.append("set %s refused" % k)
        got = c.get(k)
        if k in maybe and b(got) == maybe[k]:
            acked[k] = maybe.pop(k)  # it was applied after all
        if k in maybe and got is None:
            unsure_at.append(time.time())
        elif k in acked and b(got) != acked[k]:
            stale += 1
            lost.append(acked_at[k])
            notes.append("get %s = %r want %r" % (k, got, acked[k]))
        if i % 10 == 0:
            ks = keys[(i // 10) % 10 * 10:(i // 10) % 10 * 10 + 10]
            m = get_multi(ks)
            for kk in ks:
                if kk in maybe and b(m.get(kk)) == maybe[kk]:
                    acked[kk] = maybe.pop(kk)
                if kk in maybe and m.get(kk) is None:
                    unsure_at.append(time.time())
                elif kk in acked and b(m.get(kk)) != acked[kk]:
                    stale += 1
                    lost.append(acked_at[kk])
                    notes.append("get_multi %s = %r want %r" % (kk, m.get(kk), acked[kk]))
        ops += 1
    except Exception as e:  # noqa
        errors += 1
        err_at.append(time.time())
        notes.append("error %r" % (e,))
    maxlat = max(maxlat, time.time() - t0)
print("%s functional=%s ops=%d errors=%d stale=%d maxlat_ms=%d" % (lib, func, ops, errors, stale, maxlat * 1000))
for n in notes[:10]:
    print("  ", n)
for t in lost:
    print("LOST %.6f" % t)
for t in err_at:
    print("ERR %.6f" % t)
for t in unsure_at:
    print("UNSURE %.6f" % t)
sys.exit(0 if func == "ok" else 1)
