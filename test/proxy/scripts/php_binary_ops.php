<?php
// Runs a fixed sequence of php-memcached operations over libmemcached's
// binary protocol (test/proxy TestProxyProtocols).
//
// usage: php php_binary_ops.php ADDR PREFIX
//
// Prints one line per operation, "name -> result code", with CAS values
// shown as "cas" (nonzero) or "cas0". The caller runs it against memcached
// itself and against the proxy and compares the lines.
[$host, $port] = explode(":", $argv[1]);
$p = $argv[2];
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->setOption(Memcached::OPT_RECV_TIMEOUT, 15000000);
$m->setOption(Memcached::OPT_SEND_TIMEOUT, 15000000);
$m->setOption(Memcached::OPT_POLL_TIMEOUT, 15000);
$m->addServer($host, (int)$port);

function show($v) {
    if (is_array($v)) {
        ksort($v);
        $parts = [];
        foreach ($v as $k => $x) {
            if ($k === "cas") {
                $x = $x ? "cas" : "cas0";
            }
            $parts[] = var_export($k, true) . "=>" . show($x);
        }
        return "[" . implode(", ", $parts) . "]";
    }
    return var_export($v, true);
}

function op($name, $f) {
    global $m;
    $r = $f();
    printf("%s -> %s %s\n", $name, show($r), $m->getResultMessage());
}

$k = fn($s) => $p . $s;
op("set a", fn() => $m->set($k("a"), "alpha"));
op("get a", fn() => $m->get($k("a")));
op("get missing", fn() => $m->get($k("missing")));
op("set int", fn() => $m->set($k("int"), 42));
op("get int", fn() => $m->get($k("int")));
op("set arr", fn() => $m->set($k("arr"), ["x" => [1, 2]]));
op("get arr", fn() => $m->get($k("arr")));
op("set ttl", fn() => $m->set($k("ttl"), "t", 3600));
op("getMulti", fn() => $m->getMulti([$k("a"), $k("missing"), $k("int")]));
op("getMulti ext", function () use ($m, $k) {
    $r = $m->getMulti([$k("a"), $k("ttl")], Memcached::GET_EXTENDED);
    return is_array($r) ? array_map(fn($x) => ["value" => $x["value"], "flags" => $x["flags"], "cas" => $x["cas"]], $r) : $r;
});
op("setMulti", fn() => $m->setMulti([$k("m1") => "1", $k("m2") => "2"]));
op("deleteMulti", fn() => $m->deleteMulti([$k("m1"), $k("nope")]));
op("getMulti after", fn() => $m->getMulti([$k("m1"), $k("m2")]));
op("delete a", fn() => $m->delete($k("a")));
op("delete a again", fn() => $m->delete($k("a")));
op("add new", fn() => $m->add($k("add"), "first"));
op("add existing", fn() => $m->add($k("add"), "second"));
op("replace missing", fn() => $m->replace($k("repl"), "x"));
op("replace existing", fn() => $m->replace($k("add"), "replaced"));
op("append", fn() => $m->append($k("add"), "+tail"));
op("prepend", fn() => $m->prepend($k("add"), "head+"));
op("append missing", fn() => $m->append($k("nope"), "x"));
op("get appended", fn() => $m->get($k("add")));
op("set n", fn() => $m->set($k("n"), "10"));
op("increment", fn() => $m->increment($k("n"), 5));
op("decrement", fn() => $m->decrement($k("n"), 3));
op("decrement below zero", fn() => $m->decrement($k("n"), 100));
op("increment missing", fn() => $m->increment($k("nonum"), 1));
op("increment with initial", fn() => $m->increment($k("init"), 1, 100, 3600));
op("increment with initial again", fn() => $m->increment($k("init"), 1, 100, 3600));
op("get init", fn() => $m->get($k("init")));
op("decrement with initial", fn() => $m->decrement($k("init2"), 1, 7, 3600));
op("set text", fn() => $m->set($k("text"), "abc"));
op("increment non-numeric", fn() => $m->increment($k("text"), 1));
op("get ext", function () use ($m, $k) {
    $r = $m->get($k("add"), null, Memcached::GET_EXTENDED);
    return is_array($r) ? ["value" => $r["value"], "cas" => $r["cas"], "flags" => $r["flags"]] : $r;
});
$cas = $m->get($k("add"), null, Memcached::GET_EXTENDED)["cas"];
op("cas ok", fn() => $m->cas($cas, $k("add"), "swapped"));
op("cas stale", fn() => $m->cas($cas, $k("add"), "again"));
op("cas missing", fn() => $m->cas($cas, $k("casmissing"), "v"));
op("get swapped", fn() => $m->get($k("add")));
op("touch", fn() => $m->touch($k("add"), 3600));
op("touch missing", fn() => $m->touch($k("missing"), 3600));
op("get after touch", fn() => $m->get($k("add")));
