package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vbcache/vbcache/internal/placement"
	"github.com/vbcache/vbcache/memcache"
)

// runLocate is "vbcache locate": print the server of each key.
func runLocate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache locate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dist := fs.String("distribution", "ketama", "placement: "+distNames())
	servers := fs.String("servers", "", "servers as host:port[:weight],… in the order the clients list them")
	vbuckets := fs.Int("vbuckets", 1024, "vbucket: number of vbuckets (spread round robin over --servers)")
	config := fs.String("config", "", "vbucket: cluster map JSON file (its serverList replaces --servers)")
	rehash := fs.String("dead", "", "modulo: servers to treat as dead (comma-separated), keys rehashed as Cache::Memcached does")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache locate --distribution NAME --servers host:port[:weight],… [KEY …]\n\n"+
			"Prints \"KEY SERVER\" for each key (arguments, or one per line on stdin), with the\n"+
			"vbucket as a third column for --distribution vbucket.\n\nDistributions:\n")
		for _, d := range memcache.Distributions {
			fmt.Fprintf(stderr, "  %-13s %s\n", d.Name, d.Matches)
		}
		fmt.Fprintf(stderr, "\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	opts := &memcache.Options{VBuckets: *vbuckets, Rehash: *rehash != ""}
	var list []memcache.Server
	if *config != "" {
		data, err := os.ReadFile(*config)
		if err != nil {
			fmt.Fprintf(stderr, "vbcache locate: %v\n", err)
			return 1
		}
		opts.Config = data
	} else {
		var err error
		if list, err = memcache.ParseServers(*servers); err != nil {
			fmt.Fprintf(stderr, "vbcache locate: --servers: %v\n", err)
			return 2
		}
	}
	sel, err := memcache.NewSelector(*dist, list, opts)
	if err != nil {
		fmt.Fprintf(stderr, "vbcache locate: %v\n", err)
		return 2
	}
	if *rehash != "" {
		m, ok := sel.(*memcache.Modulo)
		if !ok {
			fmt.Fprintf(stderr, "vbcache locate: --dead needs a modulo distribution\n")
			return 2
		}
		for _, d := range strings.Split(*rehash, ",") {
			if !m.MarkDead(d) {
				fmt.Fprintf(stderr, "vbcache locate: --dead %s is not in --servers\n", d)
				return 2
			}
		}
	}
	keys := fs.Args()
	if len(keys) == 0 {
		if keys, err = placement.ReadKeys(os.Stdin); err != nil {
			fmt.Fprintf(stderr, "vbcache locate: reading keys: %v\n", err)
			return 1
		}
	}
	if err := placement.Locate(stdout, sel, keys); err != nil {
		fmt.Fprintf(stderr, "vbcache locate: %v\n", err)
		return 1
	}
	return 0
}

func distNames() string {
	var n []string
	for _, d := range memcache.Distributions {
		n = append(n, d.Name)
	}
	return strings.Join(n, ", ")
}
