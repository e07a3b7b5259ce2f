package main

import "go.uber.org/zap"

// quietZap is the etcd client's logger: errors only, so a manager's output
// is its own.
func quietZap() *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}
