// Package kproxy is a Kafka-protocol-aware TCP proxy in front of one
// broker that drops, delays, duplicates, fails or cuts chosen requests and
// responses, so that a test can make a producer retry, a transaction
// coordinator miss an answer or a follower fetch time out, precisely.
//
// # Protocol
//
// The proxy accepts connections on its listen address and dials the
// upstream broker for each. It forwards Kafka frames (a 4-byte big-endian
// size, then the payload) both ways, byte for byte unless a rule changes
// them. It reads each request's header (api key, version, correlation id,
// client id for header v1+, tagged fields for the flexible header v2;
// ControlledShutdown v0 has header v0) and keeps, per connection, the
// requests in flight in order, so that each response (correlation id, then
// tagged fields when the request version is flexible, except ApiVersions
// whose response header is always v0) is matched with its request. A
// Produce with acks=0 gets no response and is not kept. A response whose
// correlation id is not the oldest in flight is forwarded as is and
// logged; requests older than the one it answers are forgotten. A frame
// above MaxFrame, or a request header that does not parse, closes the
// connection pair. Requests of an API kmsg does not know are forwarded and
// never match a rule.
//
// # Rules
//
// A Rule matches the requests of one API, optionally only those naming a
// topic or carrying a transactional id (the request body is decoded with
// kmsg only when a rule of its API has such a filter). It acts, with a
// probability (drawn from a source seeded by Options.Seed) and at most
// Count times over all connections, on the request itself or on its
// response:
//
//	request  drop       not forwarded; no response ever comes
//	request  delay      held for Delay, with every later request of the
//	                    connection behind it
//	request  duplicate  forwarded twice: the broker processes it twice;
//	                    the second response is swallowed
//	request  error      Produce only: not forwarded; the proxy answers with
//	                    the Error code on every partition of the request
//	                    (nothing was written, the client retries)
//	request  close      the connection pair is closed instead
//	response drop       the broker processed the request; its response is
//	                    swallowed (the client times out)
//	response delay      held for Delay, with every later response of the
//	                    connection behind it
//	response error      every ErrorCode field of the response, at any depth,
//	                    is set to the Error code (any API kmsg knows)
//	response close      the connection pair is closed when the response
//	                    arrives, instead of forwarding it
//
// On each request, the first request rule that acts applies, then (unless
// it dropped, failed or closed the request) the first response rule that
// acts applies to its response. Status counts per rule the requests it
// matched and those it acted on.
//
// # Control
//
// The daemon (Run, or the hidden "isrlab kproxy" command) serves commands
// on a Unix stream socket: one JSON Request per line, each answered by one
// Response line. Client speaks it.
//
//	{"cmd":"set","rule":{"id":"dup","api":"Produce","action":"drop","count":1}}
//	{"cmd":"set","rule":{"id":"nl","api":"Produce","action":"error","error":"NOT_LEADER_OR_FOLLOWER"}}
//	{"cmd":"set","rule":{"id":"slow","api":"Fetch","direction":"request","action":"delay","delay":"200ms","topic":"t"}}
//	{"cmd":"clear","id":"dup"}
//	{"cmd":"clear-all"}
//	{"cmd":"status"}   -> {"ok":true,"status":{"conns":2,"accepted":3,"rules":[...],...}}
//
// set with the id of an existing rule replaces it, and its counters.
// Errors come back as {"ok":false,"error":"..."}.
//
// # Limits
//
// Plaintext only: no TLS (SASL works, its handshake being ordinary
// frames). The proxy does not rewrite Metadata or FindCoordinator answers,
// so the broker's advertised listener must be the proxy's address, for
// clients and followers to come back through it. Topic filters match the
// topic names a request carries: requests that name topics by id only
// (Fetch v13+, Produce v13+) match no topic filter.
package kproxy
