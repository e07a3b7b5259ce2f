package vbmap

import "unsafe"

// stringBytes views s as a byte slice without copying. The slice must not
// be modified; the CRC only reads it.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
