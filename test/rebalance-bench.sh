#!/bin/bash
# usage: test/rebalance-bench.sh BIN TAG (docs/PERFORMANCE.md, issue 25): a vbcache local cluster of 3
# nodes with 1 replica and -m 1024, 150,000 values of 4 KB through the proxy, a 4th node added and
# "ctl rebalance --wait" timed, with an open-loop load of 2000 req/s through the proxy before (8 s)
# and during (5 s) it; CPU ticks of each vbcache process over the rebalance in /tmp/mb-TAG/cpu[01].txt.
# LOCALARGS: more flags for vbcache local (--max-moves N); PERF=1: see below.
# Uses the default ports (11211-11219) and 11230-11231.
BIN=$1; TAG=$2; D=/tmp/mb-$TAG; rm -rf $D; mkdir -p $D
$BIN local $LOCALARGS --nodes 3 --replicas 1 -m 1024 --data-dir $D/data > $D/local.log 2>&1 &
LP=$!
for i in $(seq 1 120); do
  grep -q "admin.pwdb" $D/local.log 2>/dev/null && (echo version | timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211; cat >&3; timeout 0.5 head -1 <&3' | grep -q VERSION) && break
  sleep 0.5
done
export VBCACHE_CLUSTER_AUTH=$D/data/admin.pwdb
ls $VBCACHE_CLUSTER_AUTH >/dev/null || { echo "no auth file"; kill $LP; exit 1; }
$BIN bench -s 127.0.0.1:11211 --ratio 1:0 --key-pattern S --key-minimum 0 --key-maximum 149999 --requests 150000 -d 4096 -c 8 --pipeline 4 --no-progress > $D/fill.txt 2>&1
tail -3 $D/fill.txt
$BIN server --vbuckets 1024 --cluster-auth $VBCACHE_CLUSTER_AUTH -p 11230 -l 127.0.0.1 -m 1024 -u root --metrics-listen 127.0.0.1:11231 > $D/node4.log 2>&1 &
N4=$!
sleep 1
$BIN ctl add-node 127.0.0.1:11230
# the load: open loop, 2000 req/s, 4 KB, 90% gets, before (8 s) and during the rebalance
$BIN bench -s 127.0.0.1:11211 --rate 2000 --test-time 8s -d 4096 --key-maximum 149999 --ratio 1:9 -c 16 --no-progress > $D/before.txt 2>&1
$BIN bench -s 127.0.0.1:11211 --rate 2000 --test-time 5s -d 4096 --key-maximum 149999 --ratio 1:9 -c 16 --no-progress > $D/during.txt 2>&1 &
BP=$!
sleep 0.2
S=$(date +%s.%N)
for p in $(pgrep -f "vbcache|vbcl"); do echo "$p $(awk '{print $14+$15}' /proc/$p/stat) $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80)"; done > $D/cpu0.txt
# PERF=1: a system-wide profile of the first 6 s of the rebalance (perf record -a -g) in $D/perf.data
[ -n "$PERF" ] && { perf record -F 499 -a -g -o $D/perf.data -- sleep 6 > $D/perf.log 2>&1 & }
$BIN ctl rebalance --wait > $D/rebalance.txt 2>&1
E=$(date +%s.%N)
for p in $(pgrep -f "vbcache|vbcl"); do echo "$p $(awk '{print $14+$15}' /proc/$p/stat) $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80)"; done > $D/cpu1.txt
echo "$TAG rebalance wall: $(echo "$E - $S" | bc) s"
tail -3 $D/rebalance.txt
wait $BP
echo "before:"; grep -iE "p99|ops|latency|miss|err" $D/before.txt | head -8
echo "during:"; grep -iE "p99|ops|latency|miss|err" $D/during.txt | head -8
grep -h "rebalance" $D/local.log | grep -iE "done|finished|moved" | tail -2 | cut -c1-600
curl -s 127.0.0.1:11216/metrics > $D/mgr-proxy.metrics; for p in 11217 11218 11219 11231; do curl -s 127.0.0.1:$p/metrics > $D/node-$p.metrics; done
kill $N4; kill -INT $LP; wait $LP 2>/dev/null
