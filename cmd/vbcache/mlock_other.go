//go:build !linux

package main

import "errors"

// lockMemory is -k; only Linux is supported.
func lockMemory() error {
	return errors.New("not supported on this platform")
}
