// Package placement answers "where does this key live?" for an operator
// (vbcache locate) and runs the classic rehash experiment (vbcache
// rehash): place keys on n servers, add m, and count which keys stay on
// their server under each distribution, next to the theory.
//
// Everything here is a pure function of its inputs (keys, server names,
// a seed); the commands in cmd/vbcache only parse flags and print.
package placement

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/vbcache/vbcache/memcache"
)

// Locate writes "KEY SERVER" for every key, plus the vbucket as a third
// column when sel is a vbucket selector.
func Locate(w io.Writer, sel memcache.ServerSelector, keys []string) error {
	bw := bufio.NewWriter(w)
	vs, _ := sel.(*memcache.VBucket)
	for _, k := range keys {
		a, err := sel.PickServer(k)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if vs != nil {
			fmt.Fprintf(bw, "%s %s %d\n", k, a, vs.VBucketOf(k))
		} else {
			fmt.Fprintf(bw, "%s %s\n", k, a)
		}
	}
	return bw.Flush()
}

// ReadKeys reads one key per line, skipping empty lines and trimming a
// trailing "\r".
func ReadKeys(r io.Reader) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if k := strings.TrimRight(sc.Text(), "\r"); k != "" {
			keys = append(keys, k)
		}
	}
	return keys, sc.Err()
}
