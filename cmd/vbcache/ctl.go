package main

import (
	"fmt"
	"io"
)

// runCtl is "vbcache ctl" (being written).
func runCtl(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "vbcache ctl: not yet implemented")
	return 2
}
