package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/vbcache/vbcache/internal/placement"
)

// runRehash is "vbcache rehash": the add-a-server experiment.
func runRehash(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache rehash", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keys := fs.String("keys", "", "keys to follow one by one, comma-separated (default a..z)")
	servers := fs.String("servers", "", "servers before, host[:port][:weight],… (default node1,node2,node3)")
	add := fs.String("add", "", "servers added (default node4)")
	random := fs.Int("random", 100000, "size of the random key set (0: none)")
	seed := fs.Uint64("seed", 1, "seed of the random key set")
	dists := fs.String("distributions", "", "comma-separated distributions (default all)")
	vbuckets := fs.Int("vbuckets", 1024, "number of vbuckets for vbucket")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache rehash [flags]\n\n"+
			"Places keys on the servers, adds servers, and reports for each distribution which\n"+
			"keys stay and the hit rate, next to the theory (modulo keeps about 1/(n+1) when one\n"+
			"server joins n; consistent hashing keeps about n/(n+m)). For vbucket it shows the map\n"+
			"remapped without moving data, and vbuckets moved with their data.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vbcache rehash: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg := placement.RehashConfig{Keys: splitList(*keys), Servers: splitList(*servers), Add: splitList(*add),
		RandomKeys: *random, Seed: *seed, Distributions: splitList(*dists), VBuckets: *vbuckets}
	if *random == 0 {
		cfg.RandomKeys = -1
	}
	rep, err := placement.Rehash(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "vbcache rehash: %v\n", err)
		return 2
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "vbcache rehash: %v\n", err)
		return 1
	}
	return 0
}
