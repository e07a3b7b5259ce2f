#!/usr/bin/python3
"""pymemcache over TLS, verifying the server with the test CA; exit
non-zero on any wrong result.

usage: pymemcache_tls_check.py HOST:PORT CA.pem
"""
import ssl
import sys

from pymemcache.client.base import Client


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=sys.argv[2])
    ctx.check_hostname = False  # the certificate names 127.0.0.1 as an IP SAN
    mc = Client((host, int(port)), tls_context=ctx, connect_timeout=5, timeout=5)
    check("set", mc.set("tls:a", b"alpha"), True)
    check("get", mc.get("tls:a"), b"alpha")
    check("get miss", mc.get("tls:nope"), None)
    big = bytes(range(256)) * 1000
    check("set big", mc.set("tls:big", big), True)
    check("get big", mc.get("tls:big"), big)
    check("get_many", mc.get_many(["tls:a", "tls:nope", "tls:big"]), {"tls:a": b"alpha", "tls:big": big})
    val, cas = mc.gets("tls:a")
    check("cas", mc.cas("tls:a", b"alpha2", cas), True)
    check("cas stale", mc.cas("tls:a", b"alpha3", cas), False)
    check("set n", mc.set("tls:n", b"10"), True)
    check("incr", mc.incr("tls:n", 5), 15)
    check("touch", mc.touch("tls:a", 100), True)
    check("delete", mc.delete("tls:a", noreply=False), True)
    check("get deleted", mc.get("tls:a"), None)
    mc.close()
    print("pymemcache over TLS: all checks passed")


if __name__ == "__main__":
    main()
