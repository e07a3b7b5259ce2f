package main

import "syscall"

// lockMemory locks all current and future pages in RAM (-k).
func lockMemory() error {
	return syscall.Mlockall(syscall.MCL_CURRENT | syscall.MCL_FUTURE)
}
