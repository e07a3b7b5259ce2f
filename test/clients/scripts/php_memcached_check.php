<?php
// Exercise a cache node with php-memcached (libmemcached) over the BINARY
// protocol, optionally with SASL PLAIN; exit non-zero on any wrong result.
//
// usage: php php_memcached_check.php HOST:PORT [USER PASSWORD]

function check($what, $got, $want) {
    if ($got !== $want) {
        fwrite(STDERR, "FAIL $what: got " . var_export($got, true) . ", want " . var_export($want, true) . "\n");
        exit(1);
    }
}

[$host, $port] = explode(':', $argv[1]);
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setOption(Memcached::OPT_COMPRESSION, false);
if (isset($argv[3])) {
    $m->setSaslAuthData($argv[2], $argv[3]);
}
$m->addServer($host, (int)$port);
$p = "php:";

check("set", $m->set($p . "a", "alpha"), true);
check("get", $m->get($p . "a"), "alpha");
check("get miss", $m->get($p . "missing"), false);
check("get miss code", $m->getResultCode(), Memcached::RES_NOTFOUND);
check("add existing", $m->add($p . "a", "x"), false);
check("add new", $m->add($p . "b", "beta"), true);
check("replace", $m->replace($p . "b", "BETA"), true);
check("replace missing", $m->replace($p . "zz", "x"), false);
check("append", $m->append($p . "b", "-end"), true);
check("prepend", $m->prepend($p . "b", "start-"), true);
check("after append", $m->get($p . "b"), "start-BETA-end");

$keys = [];
$items = [];
for ($i = 0; $i < 100; $i++) {
    $keys[] = $p . "m$i";
    $items[$p . "m$i"] = "value-$i";
}
check("setMulti", $m->setMulti($items), true);
$got = $m->getMulti(array_merge($keys, [$p . "nope"]));
check("getMulti count", count($got), 100);
foreach ($items as $k => $v) {
    check("getMulti $k", $got[$k], $v);
}

$r = $m->get($p . "a", null, Memcached::GET_EXTENDED);
check("get extended", $r["value"], "alpha");
check("cas", $m->cas($r["cas"], $p . "a", "alpha2"), true);
check("cas stale", $m->cas($r["cas"], $p . "a", "alpha3"), false);
check("cas stale code", $m->getResultCode(), Memcached::RES_DATA_EXISTS);
check("after cas", $m->get($p . "a"), "alpha2");

check("set counter", $m->set($p . "n", 10), true);
check("increment", $m->increment($p . "n", 5), 15);
check("decrement", $m->decrement($p . "n", 20), 0);
check("increment missing", $m->increment($p . "nokey", 1), false);
// binary protocol only: create with an initial value
check("incrementByKey initial", $m->increment($p . "init", 1, 40, 0), 40);
check("increment created", $m->increment($p . "init", 2), 42);

check("touch", $m->touch($p . "a", 100), true);
check("touch missing", $m->touch($p . "nokey", 100), false);

check("delete", $m->delete($p . "a"), true);
check("delete missing", $m->delete($p . "a"), false);
check("get deleted", $m->get($p . "a"), false);

$v = $m->getVersion();
check("version reported", is_array($v) && count($v) == 1, true);
check("flush", $m->flush(), true);
check("get after flush", $m->get($p . "m5"), false);
echo "php-memcached binary" . (isset($argv[3]) ? " + SASL" : "") . ": all checks passed\n";
