module github.com/vbcache/vbcache

go 1.26

require github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
