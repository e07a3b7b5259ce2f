//go:build !unix

package main

import (
	"errors"

	"github.com/vbcache/vbcache/internal/server/cmdline"
)

var errNotUnix = errors.New("not supported on this platform")

func daemonize() error           { return errNotUnix }
func enableCoreDumps() error     { return errNotUnix }
func raiseFileLimit(n int) error { return nil }
func switchUser(name string) error {
	return fail(cmdline.ExitUsage, "vbcache: -u is not supported on this platform")
}
func processAlive(pid int) bool { return false }
