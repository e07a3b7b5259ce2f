// Package sasl is the server side of SASL authentication for the binary
// protocol: the PLAIN mechanism (RFC 4616), SCRAM-SHA-1, SCRAM-SHA-256 and
// SCRAM-SHA-512 (RFC 5802, RFC 7677) without channel binding, and loaders for
// memcached's two credential files. It also holds the client side of SCRAM
// ([NewClient], client.go), with which the cluster's own processes log in to
// a node as the cluster administrator (package admin drives the exchange).
//
// # Shape
//
// The package is pure: no sockets, no goroutines, no imports from the server.
// An [Authenticator] is built once per process from a [Config] (a password
// lookup function, the SCRAM iteration count, a random source). The server
// creates one [Server] per SASL_AUTH request with
// [Authenticator.NewServer] and feeds it the request values:
//
//	client                        protocol layer               sasl.Server
//	SASL_LIST_MECHS (0x20)   ->   body = Mechanisms()
//	SASL_AUTH (0x21) key=mech ->  NewServer(mech)          ->  ErrUnknownMechanism?
//	            value=msg1   ->   Step(msg1)               ->  out, done, err
//	SASL_STEP (0x22) msg2    ->   Step(msg2)               ->  out, done, err
//
// Step's three results map onto response statuses:
//
//	(out, false, nil)  0x21 AUTH_CONTINUE, body = out (SCRAM server-first)
//	(out, true,  nil)  0x00 SUCCESS, body = out ("v=..." for SCRAM, empty for PLAIN)
//	(nil, _,     err)  0x20 AUTH_ERROR; the Server is dead, Step returns ErrSequence
//
// Putting the SCRAM server-final message in the SUCCESS body is what
// Couchbase's memcached does and what Couchbase SDKs expect: gocbcore treats
// any non-success status to SASL_STEP as a failure. memcached built with Cyrus
// SASL instead answers the client-final with AUTH_CONTINUE carrying "v=...",
// expects an empty SASL_STEP, and then replies "Authenticated" (it creates its
// sasl_conn without SASL_SUCCESS_DATA). libmemcached's loop stops at the first
// non-AUTH_CONTINUE status, so it accepts the shorter Couchbase exchange too;
// it just never checks the server signature. We therefore always use the
// two-round-trip form.
//
// A Server is a small state machine (see state): start → (optional empty
// initial response) → server-first sent → done or failed. Any error is final;
// a new SASL_AUTH gets a new Server. A Server is not safe for concurrent use,
// which is fine because one connection owns it. It keeps a few hundred bytes:
// the gs2 header, the nonce, the AuthMessage prefix and two keys.
//
// # Mechanism names
//
// Couchbase spells the SCRAM mechanisms without the second hyphen
// ("SCRAM-SHA512", "SCRAM-SHA256", "SCRAM-SHA1"): that is what kv_engine
// lists and what gocbcore, the .NET and the Java SDKs send as the SASL_AUTH
// key. The IANA registry, RFC 5802/7677 and Cyrus SASL (and so libmemcached,
// which hands the server's list to sasl_client_start and sends whatever Cyrus
// chose) use "SCRAM-SHA-1", "SCRAM-SHA-256" and "SCRAM-SHA-512". NewServer
// accepts both spellings, case-sensitively, as both ecosystems send upper
// case. [Mechanisms] lists the Couchbase spellings first, strongest first and
// byte-for-byte as kv_engine does, then the IANA spellings, then PLAIN.
// Clients pick by their own preference among the names they recognise
// (gocbcore and the .NET SDK try SHA-512, then 256, then 1; Cyrus ranks its
// plugins), so the order mostly matters to clients that take the first name
// they know, and those should get the strongest.
//
// # SCRAM details
//
// The server keeps plaintext passwords (memcached's files are plaintext) and
// derives SaltedPassword = PBKDF2(password, salt, i) itself. The salt for a
// user is HMAC-SHA-256(key, hash name, user) truncated to 16 bytes, where key
// is 32 random bytes drawn when the Authenticator is made; so a salt is stable
// for the life of the process and differs across restarts. The derived
// StoredKey and ServerKey are cached per (hash, user) together with an HMAC
// fingerprint of the password, so a changed password is noticed; the cache is
// cleared when it reaches maxCachedKeys entries.
//
// Unknown users get the same treatment up to the proof: the salt comes from
// the same function, the nonce is fresh, and only the proof check fails, with
// the same ErrAuthFailed as a wrong password. What is not hidden: the first
// attempt for a known user pays for PBKDF2 (milliseconds) and later ones hit
// the cache, whereas unknown users never run PBKDF2, so a client timing first
// attempts can tell the two apart. Running PBKDF2 for every unknown name would
// hand out a CPU amplifier instead.
//
// Not implemented: channel binding (the -PLUS mechanisms; a "p=" gs2 flag is
// refused, "y" is accepted because we advertise no -PLUS), authorization
// identities different from the authentication identity (refused), SASLprep
// (names and passwords are compared as bytes, which is the same thing for
// ASCII), and the SCRAM "e=" server-error message (errors are Go errors; the
// caller answers AUTH_ERROR). Messages longer than MaxMessageLen are refused.
//
// # Credential files
//
// [LoadPasswordFile] reads the file MEMCACHED_SASL_PWDB names and
// [LoadAuthFile] the file given to memcached -Y. Both are "user:password" per
// line; they differ in where the password ends (see each function). Both are
// stricter than memcached: malformed lines, a user on more than two lines,
// empty passwords and empty files are start-up errors wrapping
// [ErrCredentialFile] rather than entries that silently never match. A user
// on two lines has a password and a previous one ([Passwords]), both of
// which log in, so that a password can be rotated without a moment when
// some process holds one the others refuse.
package sasl
