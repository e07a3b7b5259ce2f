// Exercise a cache node with memjs, a binary-protocol-only client, with or
// without SASL PLAIN; exit non-zero on any wrong result.
//
// usage: node check.js HOST:PORT [USER PASSWORD]
//
// memjs 1.3.2 has no CAS and no multi-get API: the multi-get is 50
// concurrent gets (memjs pipelines them on one connection), and CAS is
// left to the other clients.
'use strict';
const memjs = require('memjs');

const [addr, user, password] = process.argv.slice(2);
const opts = { retries: 0, timeout: 5, conntimeout: 5, logger: { log() {} } };
if (user !== undefined) {
  opts.username = user;
  opts.password = password;
}
const mc = memjs.Client.create(addr, opts);

function check(what, got, want) {
  const g = Buffer.isBuffer(got) ? got.toString('latin1') : got;
  if (g !== want) {
    console.error(`FAIL ${what}: got ${JSON.stringify(g)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
}

async function main() {
  const p = 'memjs:';
  check('set', await mc.set(p + 'a', 'alpha', {}), true);
  let r = await mc.get(p + 'a');
  check('get', r.value, 'alpha');
  r = await mc.get(p + 'missing');
  check('get miss', r.value, null);
  check('add existing', await mc.add(p + 'a', 'x', {}).catch(() => false), false);
  check('add new', await mc.add(p + 'b', 'beta', {}), true);
  check('replace', await mc.replace(p + 'b', 'BETA', {}), true);
  check('replace missing', await mc.replace(p + 'zz', 'x', {}).catch(() => false), false);
  check('append', await mc.append(p + 'b', '-end'), true);
  check('after append', (await mc.get(p + 'b')).value, 'BETA-end');
  // (memjs 1.3.2's prepend sends the Append opcode, so it is not checked)

  const bin = Buffer.alloc(100000);
  for (let i = 0; i < bin.length; i++) bin[i] = (i * 7) & 0xff;
  check('set binary', await mc.set(p + 'bin', bin, {}), true);
  check('get binary', Buffer.compare((await mc.get(p + 'bin')).value, bin), 0);

  const keys = [];
  for (let i = 0; i < 50; i++) keys.push(p + 'm' + i);
  await Promise.all(keys.map((k) => mc.set(k, 'v-' + k, {})));
  const vals = await Promise.all(keys.map((k) => mc.get(k)));
  vals.forEach((v, i) => check('multi ' + keys[i], v.value, 'v-' + keys[i]));

  // increment creates with the initial value (binary protocol only)
  r = await mc.increment(p + 'n', 5, { initial: 10 });
  check('incr create', r.value, 10);
  r = await mc.increment(p + 'n', 5, {});
  check('incr', r.value, 15);
  r = await mc.decrement(p + 'n', 20, {});
  check('decr floor', r.value, 0);
  check('incr text value', await mc.set(p + 't', 'abc', {}), true);
  check('incr non-numeric fails', await mc.increment(p + 't', 1, {}).then(() => 'ok', () => 'error'), 'error');

  check('touch', await mc.touch(p + 'a', 100), true);
  check('touch missing', await mc.touch(p + 'nokey', 100), false);
  check('delete', await mc.delete(p + 'a'), true);
  check('delete missing', await mc.delete(p + 'a'), false);
  check('get deleted', (await mc.get(p + 'a')).value, null);

  const st = await new Promise((resolve, reject) =>
    mc.stats((err, server, stats) => (err ? reject(err) : resolve(stats))));
  check('stats has curr_items', typeof st.curr_items, 'string');
  await mc.flush();
  check('get after flush', (await mc.get(keys[3])).value, null);
  console.log('memjs' + (user !== undefined ? ' + SASL' : '') + ': all checks passed');
  mc.close();
}

main().catch((e) => {
  console.error('FAIL', e && e.stack ? e.stack : e);
  process.exit(1);
});
