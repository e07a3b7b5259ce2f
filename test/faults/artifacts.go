package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/history"
)

// artifactsDir is where the fault tests leave files for a reader (the
// HTML of a history that failed its check): $VBCACHE_ARTIFACTS when set
// (writeVisualisation makes it if need be), else os.TempDir().
func artifactsDir() string {
	if d := os.Getenv("VBCACHE_ARTIFACTS"); d != "" {
		return d
	}
	return os.TempDir()
}

// writeVisualisation writes porcupine's HTML visualisation of res to
// vbcache-<name>-<nanoseconds>.html in artifactsDir, logs its path and
// returns it; on an error it logs that and returns "".
func writeVisualisation(t *testing.T, res history.Result, name string) string {
	t.Helper()
	dir := artifactsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("porcupine's visualisation: %v", err)
		return ""
	}
	path := filepath.Join(dir, fmt.Sprintf("vbcache-%s-%d.html", name, time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		t.Logf("porcupine's visualisation: %v", err)
		return ""
	}
	err = res.Visualize(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Logf("porcupine's visualisation %s: %v", path, err)
		return ""
	}
	t.Logf("porcupine's visualisation: %s", path)
	return path
}
