// Package cmdline reads memcached 1.6.18's command line into a
// server.Config, for "vbcache server", so that a script written for
// memcached starts a vbcache node with the same flags, and fails with the
// same message and exit status when memcached would.
//
// Data flow: Parse reads the arguments the way memcached's getopt_long
// loop reads them. Short flags combine ("-vv", "-vdA"), values attach or
// follow ("-p11211", "-p 11211"), long names take "--name=value" or
// "--name value" and may be abbreviated to any unique prefix, "--" ends
// the flags, and -o takes a comma-separated list of sub-options read like
// glibc's getsubopt. Parse stops at the first -h, -V or -i and returns
// that Action. The checks memcached makes while it reads the flags are
// made there, in the same order and with the same messages. Finish then
// makes the checks memcached makes on the finished settings (-m and -I in
// bytes, slab_sizes, -S and -Y choosing the protocol), leaves the rest to
// server.Config.Validate, and last reads the files the flags name (the TLS
// certificates, the SASL password file, -Y's auth file), as memcached
// reads them after everything else has been checked. Warnings go into
// Options.Warnings; the caller prints them (Parse's before calling Finish,
// as memcached prints them while it reads the flags).
//
// What is not the node's (-d, -P, -u, -k, -r) is only recorded in Options:
// the caller acts on the process. The memcached settings vbcache accepts
// but has no use for (-N, hash_algorithm, slab_sizes, the slab_automove
// family, …) are checked as memcached checks them and then dropped.
//
// Errors: every failure is an *ExitError carrying memcached's message and
// its exit status (ExitFailure, ExitUsage, ExitNoUser, ExitOSErr, as
// sysexits.h names them); the caller prints Msg as it is and exits with
// Code. Where memcached reads a number with atoi and silently takes
// garbage as 0 (or "12abc" as 12), vbcache refuses the value with an
// "illegal value" message instead. HelpText is memcached's -h listing,
// trimmed to what vbcache accepts; a test checks it names every flag in
// the option table.
//
// The files: options.go holds Options and the option table (short
// letter, long name, whether it takes a value); parse.go the getopt loop
// and the flags' values; extended.go the -o sub-options; security.go -S,
// -Y, -Z and the -o ssl_* options, and loading their files; finish.go the
// checks after the flags; help.go the -h text.
//
// Nothing here keeps state between calls; an Options belongs to its
// caller.
package cmdline
