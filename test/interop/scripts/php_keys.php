<?php
// php-memcached side of test/interop: write or read every key of KEYFILE.
//
// usage: php php_keys.php write|read ketama|oaat SERVERS KEYFILE
// "ketama" sets OPT_LIBKETAMA_COMPATIBLE (MD5 + weighted ketama); "oaat"
// keeps the defaults (modula, one-at-a-time). Values are "v:".key.
[$_, $mode, $dist, $servers, $keyfile] = $argv;
$keys = array_values(array_filter(explode("\n", file_get_contents($keyfile)), 'strlen'));
$m = new Memcached();
if ($dist === 'ketama') {
    $m->setOption(Memcached::OPT_LIBKETAMA_COMPATIBLE, true);
}
$m->setOption(Memcached::OPT_COMPRESSION, false);
foreach (explode(',', $servers) as $s) {
    $p = explode(':', $s);
    $m->addServer($p[0], (int)$p[1], isset($p[2]) ? (int)$p[2] : 1);
}
$bad = 0;
foreach ($keys as $k) {
    if ($mode === 'write') {
        if (!$m->set($k, "v:$k")) { echo "set failed: $k ", $m->getResultMessage(), "\n"; $bad++; }
    } elseif ($m->get($k) !== "v:$k") {
        echo "missing: $k\n"; $bad++;
    }
}
printf("php-memcached %s %s: %d keys, %d bad\n", $mode, $dist, count($keys), $bad);
exit($bad ? 1 : 0);
