module github.com/vbcache/vbcache

go 1.26
