// spymemcached side of test/interop: write or read every key of KEYFILE.
//
// usage: java -cp spymemcached.jar:DIR SpyKeys write|read ketama|ketama-weighted SERVERS KEYFILE
// SERVERS is "host:port[:weight],...". "ketama" is what the builder offers:
// ConnectionFactoryBuilder with Locator.CONSISTENT and
// DefaultHashAlgorithm.KETAMA_HASH (an unweighted KetamaNodeLocator).
// "ketama-weighted" takes the weights, which only KetamaNodeLocator's own
// constructor accepts, so it overrides DefaultConnectionFactory.createLocator.
// Both label points in the default SPYMEMCACHED format. Values are the
// strings "v:"+key (the default transcoder stores them as UTF-8, flags 0).
// read prints every key not found and exits 1 if any.
//
// The test compiles this file with javac into a temporary directory.

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;

import net.spy.memcached.AddrUtil;
import net.spy.memcached.ConnectionFactory;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.DefaultConnectionFactory;
import net.spy.memcached.DefaultHashAlgorithm;
import net.spy.memcached.KetamaNodeKeyFormatter;
import net.spy.memcached.KetamaNodeLocator;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.MemcachedNode;
import net.spy.memcached.NodeLocator;

public class SpyKeys {
    public static void main(String[] args) throws Exception {
        // spymemcached logs every connection at INFO on stderr; keep warnings.
        System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SunLogger");
        java.util.logging.Logger.getLogger("net.spy.memcached").setLevel(Level.WARNING);

        String mode = args[0], dist = args[1], servers = args[2], keyfile = args[3];
        List<String> keys = new ArrayList<>();
        for (String l : Files.readAllLines(Paths.get(keyfile), StandardCharsets.UTF_8)) {
            if (!l.isEmpty()) {
                keys.add(l);
            }
        }
        StringBuilder list = new StringBuilder();
        List<Integer> weights = new ArrayList<>();
        for (String s : servers.split(",")) {
            String[] p = s.split(":");
            list.append(list.length() > 0 ? " " : "").append(p[0]).append(':').append(p[1]);
            weights.add(p.length > 2 ? Integer.parseInt(p[2]) : 1);
        }
        List<InetSocketAddress> addrs = AddrUtil.getAddresses(list.toString());

        ConnectionFactory cf;
        if (dist.equals("ketama")) {
            cf = new ConnectionFactoryBuilder()
                .setLocatorType(ConnectionFactoryBuilder.Locator.CONSISTENT)
                .setHashAlg(DefaultHashAlgorithm.KETAMA_HASH)
                .build();
        } else if (dist.equals("ketama-weighted")) {
            Map<InetSocketAddress, Integer> w = new HashMap<>();
            for (int i = 0; i < addrs.size(); i++) {
                w.put(addrs.get(i), weights.get(i));
            }
            cf = new DefaultConnectionFactory() {
                @Override
                public NodeLocator createLocator(List<MemcachedNode> nodes) {
                    return new KetamaNodeLocator(nodes, DefaultHashAlgorithm.KETAMA_HASH,
                        KetamaNodeKeyFormatter.Format.SPYMEMCACHED, w);
                }
            };
        } else {
            throw new IllegalArgumentException("distribution " + dist);
        }
        MemcachedClient c = new MemcachedClient(cf, addrs);
        // Wait for every connection: an operation for a node that is not
        // connected yet would be redistributed (FailureMode.Redistribute).
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (c.getAvailableServers().size() < addrs.size()) {
            if (System.nanoTime() > deadline) {
                System.out.println("not connected to all of " + addrs + ": " + c.getAvailableServers());
                System.exit(1);
            }
            Thread.sleep(10);
        }
        int bad = 0;
        for (String k : keys) {
            String want = "v:" + k;
            if (mode.equals("write")) {
                if (!c.set(k, 0, want).get(5, TimeUnit.SECONDS)) {
                    System.out.println("set failed: " + k);
                    bad++;
                }
            } else if (!want.equals(c.get(k))) {
                System.out.println("missing: " + k);
                bad++;
            }
        }
        c.shutdown(5, TimeUnit.SECONDS);
        System.out.printf("spymemcached %s %s: %d keys, %d bad (addresses %s)%n", mode, dist, keys.size(), bad, addrs);
        System.exit(bad > 0 ? 1 : 0);
    }
}
