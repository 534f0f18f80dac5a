// Package netguard keeps outbound requests for untrusted URLs on the public
// internet.
//
// # Overview
//
// URLs that arrive inside chat messages (images, voice, later web pages the
// model asks for) are written by strangers. Fetched naively, such a URL can
// reach the bot's own host (loopback), the operator's network (private,
// link-local, CGNAT, unique-local), or a cloud metadata service that hands
// out credentials (169.254.169.254, fd00:ec2::254). A [Guard] refuses every
// address that is not public unicast, with an error wrapping [ErrBlocked]:
//
//   - [CheckAddr] classifies one address. IPv6 forms that carry an IPv4
//     address (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged
//     by the address they carry; Teredo, IPv4-compatible and zoned addresses
//     are refused outright, and so is IPv6 outside 2000::/3.
//   - [Guard.CheckURL] accepts http and https URLs without userinfo whose
//     host is a canonical dotted quad, a bracketed IPv6 literal, or an ASCII
//     name every one of whose resolved addresses passes. Numeric spellings
//     that some parsers read as IPv4 ("2130706433", "0x7f.1", "0177.0.0.1",
//     "127.1", "127.0.0.1.") are refused without resolving.
//   - [Guard.DialContext] resolves the name itself, checks every answer and
//     connects to the checked IP literals, so a DNS answer that changes
//     between CheckURL and the connect (rebinding) cannot redirect the
//     connection; the dialer's Control hook checks the socket address once
//     more just before connect.
//   - [Guard.Client] is an *http.Client that dials only through DialContext,
//     never uses a proxy (a proxy would do its own resolution), re-checks
//     every redirect target and bounds the whole request by a timeout.
//
// [Config.Allow] lets chosen prefixes through: tests serving from 127.0.0.1,
// or an operator who deliberately serves media from a private host.
//
// # Concurrency
//
// A Guard is immutable after [New] and safe for concurrent use; the clients
// it returns share one transport and its connection pool.
package netguard
