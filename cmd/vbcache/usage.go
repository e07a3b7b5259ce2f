package main

import (
	"fmt"
	"io"

	"github.com/vbcache/vbcache/internal/server/cmdline"
)

// printServerHelp is "vbcache server -h".
func printServerHelp(w io.Writer) {
	fmt.Fprintf(w, "vbcache %s\n%s", version(), cmdline.HelpText)
}

// licenseText is "vbcache server -i".
const licenseText = `vbcache is a memcached-compatible cache written from scratch in Go.
It contains no memcached or libevent code; see the project's repository for
its license.
`
