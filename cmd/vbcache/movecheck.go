package main

import (
	"fmt"
	"io"
)

// runMovecheck is "vbcache movecheck" (being written).
func runMovecheck(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "vbcache movecheck: not yet implemented")
	return 2
}
