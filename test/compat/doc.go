// Package compat is the differential compatibility suite: every script in
// testdata/*.txt is played against a real memcached (Debian's 1.6.18 is the
// reference) and against `vbcache server`, each freshly started with the
// script's flags on a free port of 127.0.0.1, and the two must answer
// byte for byte the same, step by step, after the normalization rules in
// normalize_test.go (the one place that names what may legitimately differ:
// CAS numbers, version strings, volatile stats, timestamps).
//
// memcached's replies are also kept in testdata/*.golden so that a change in
// behaviour shows up as a diff on review. The live memcached run is the
// primary reference; if it disagrees with the golden file the test logs a
// warning. Regenerate the golden files with
//
//	go test ./test/compat -rewrite
//
// To check the harness itself (framing and normalization) run memcached
// against memcached; this must pass cleanly:
//
//	VBCACHE_COMPAT_TARGET=memcached go test ./test/compat
//
// Run one script with -run 'TestCompat/<name>' (the file name without .txt).
//
// A sequence too bulky for a script is a Go test that starts memcached and
// the target with the same flags and requires the same outcome of both:
// TestLeakyBinaryGetBigSets (bigsets_test.go) replays memcached's
// t/binary.t "Leaky binary get test", 100 sets of 573,440 bytes under
// -o no_modern, each read back over the binary protocol.
//
// # Script language
//
// A script is a text file of steps. Lines starting with '#' are comments.
// The optional first directive `flags: <memcached flags>` gives command-line
// flags for both servers (for example `flags: -m 2 -M` or `flags: -I 2k`);
// the harness always adds `-p <port> -l 127.0.0.1` (and `-U 0 -u root` for
// memcached when needed). An optional `vary: <stat> ...` line before the
// first step names stats fields whose values depend on the machine in this
// script (they are shown as *).
//
// Steps are separated by blank lines. A step is a group of lines: first any
// directives (lines starting with '@'), then payload lines. Every payload
// line is sent followed by "\r\n", so
//
//	set foo 0 0 5
//	hello
//
// sends "set foo 0 0 5\r\nhello\r\n" in one write. After the step's bytes the
// harness sends "mn\r\n" and reads until the reply ends in "MN\r\n"; the
// step's reply is everything before that MN. Do not put "MN\r\n" in values.
//
// Escapes inside payload lines:
//
//	\r \n \t \0 \\      CR, LF, tab, NUL, backslash
//	\s                  a space (use it for trailing spaces)
//	\e                  nothing: a line "\e" is an empty line (an empty value)
//	\xHH                any byte
//	\{ \$               a literal '{' or '$'
//	\c                  at the end of a line: do not append "\r\n"
//	{X*N}               X repeated N times (X may hold escapes): {a*251}
//	${casN}             the N-th distinct CAS value this server returned in
//	                    this script (numbered from 1 in order of appearance)
//	${now} ${now+N} ${now-N}
//	                    the current unix time, plus or minus N seconds
//
// Directives:
//
//	@conn N     use client connection N (1 is the default) for this and the
//	            following steps; it is opened on first use and reopened
//	            after it was closed
//	@close      the server is expected to close the connection: do not send
//	            mn; read until EOF (or a 5 s timeout); the reply ends with
//	            the marker line "!eof" or "!timeout". A step with @close and
//	            no payload just connects and waits (max-connections tests).
//	@raw        do not send mn; read until 300 ms pass without data, EOF or
//	            5 s (for replies that cannot be framed)
//	@nomn       send and read nothing (to split one command over several
//	            writes; the next step completes it)
//	@unchecked R
//	            play the step but do not compare its reply, only log it; R
//	            says why the reply depends on the machine, not the server
//	@exit       after the step, wait up to 5 s for the server process to
//	            exit and append "!exited" or "!running"
//
// Replies are rendered (in golden files and diffs) one line per "\r\n"
// terminated line, with non-printable bytes escaped as above, runs of 8 or
// more equal bytes written {X*N}, a bare LF shown as \n and a last line
// without terminator ended by \c.
//
// Every step has a 5 s read deadline. A step that times out is marked
// "!timeout" and its connection is reopened; after 3 timeouts the rest of
// the script is skipped for that server ("!not-run"), so a hung server
// cannot stall the suite.
package compat
