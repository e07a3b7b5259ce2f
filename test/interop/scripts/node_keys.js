// npm memcached side of test/interop: write or read every key of KEYFILE.
//
// usage: node node_keys.js write|read ketama SERVERS KEYFILE
// SERVERS is "host:port[:weight],..."; weights go in memcached's
// {"host:port": weight} form. Its hashring uses ketama compatibility
// (MD5, "host-N" for port 11211). Values are "v:"+key.
'use strict';
const fs = require('fs');
const Memcached = require('memcached');

const [mode, dist, servers, keyfile] = process.argv.slice(2);
const keys = fs.readFileSync(keyfile, 'utf8').split('\n').filter((k) => k.length > 0);
const locations = {};
for (const s of servers.split(',')) {
  const p = s.split(':');
  locations[p[0] + ':' + p[1]] = p.length > 2 ? Number(p[2]) : 1;
}
const m = new Memcached(locations, { retries: 0, timeout: 2000, maxKeySize: 250 });
let bad = 0;
let i = 0;
function next() {
  if (i === keys.length) {
    console.log(`npm memcached ${mode} ${dist}: ${keys.length} keys, ${bad} bad`);
    m.end();
    process.exitCode = bad ? 1 : 0;
    return;
  }
  const k = keys[i++];
  if (mode === 'write') {
    m.set(k, 'v:' + k, 0, (err) => {
      if (err) { console.log('set failed:', k, String(err)); bad++; }
      next();
    });
  } else {
    m.get(k, (err, v) => {
      if (err || v !== 'v:' + k) { console.log('missing:', k, err ? String(err) : v); bad++; }
      next();
    });
  }
}
next();
