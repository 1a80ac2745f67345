// Package faultfs is a FUSE filesystem that sits between a broker and its
// data directory and injects disk faults: latency (with jitter), EIO with a
// probability, hangs, and crashes that forget every write not fsynced.
//
// A mount mirrors a backing directory (go-fuse loopback underneath). Faults
// apply per operation kind (OpRead, OpWrite, OpFsync, OpMeta or OpAll) and
// optionally only to paths under a prefix. With no fault active an
// operation costs one atomic load on top of the loopback, and read-only or
// O_APPEND opens can be served by FUSE passthrough (see PassthroughMode).
//
// # Crash model
//
// Writes go straight to the backing directory; faultfs keeps only what it
// needs to go back to the last durable state, as a power loss on a disk
// with a page cache would:
//
//   - a file's content is durable up to its last fsync (or fdatasync): a
//     crash truncates it to the size it had then and restores the synced
//     bytes overwritten since, which faultfs saved on their first overwrite
//     (appends cost nothing but the synced size);
//   - a create, mkdir, unlink, rmdir or rename is durable once the
//     directories it changed are fsynced after it; a new file or directory
//     is also durable once it is itself fsynced. Unlinked and replaced
//     files wait in a hidden trash directory (.faultfs-trash-<run id> at the
//     root of the backing directory) until then. Crash undoes the pending
//     changes newest first. A change made durable also makes durable the
//     pending changes it was made on (same name, or a name above or below
//     it). At most 4096 changes and 1 GiB of trash stay pending; beyond
//     that the oldest become durable (Status.ForcedDurable), as a journal
//     commit would make them.
//
// A torn crash (Torn) keeps a random, page-aligned part of each file's
// unsynced appends instead, so that a log's tail is cut inside a batch and
// its recovery has to find the tear. Stop the writers before a crash
// (PowerLoss kills them, waits, then crashes), as a real power loss stops
// them. Close (a clean unmount) makes everything durable and empties the
// trash.
//
// # Control
//
// The daemon (Run, or "isrlab faultfs") serves commands on a Unix stream
// socket: one JSON Request per line, each answered by one Response line,
// any number per connection. Client speaks it.
//
//	{"cmd":"latency","op":"write","prefix":"topic-0/","latency":"20ms","jitter":"5ms"}
//	{"cmd":"eio","op":"fsync","probability":0.5}
//	{"cmd":"hang","op":"all"}
//	{"cmd":"unhang"}
//	{"cmd":"crash"}     -> {"ok":true,"crash":{"files":1,"bytes_lost":4096,"undone":2}}
//	{"cmd":"crash","torn":true}
//	{"cmd":"status"}    -> {"ok":true,"status":{"faults":[...],"counters":{...},...}}
//	{"cmd":"heal"}      -> {"ok":true}
//
// op is read, write, fsync, meta or all (the default); prefix is a path
// relative to the mount point. A latency, eio or hang command replaces an
// active fault of the same kind, op and prefix, so every command but crash
// is idempotent; heal removes all faults. Errors come back as
// {"ok":false,"error":"..."}.
//
// # Cleanup
//
// A mount's source is FSNamePrefix+runID and its type FSType
// (fuse.faultfs), so Mounts and CleanStale find the mounts of dead runs in
// /proc/self/mountinfo and detach them (MNT_DETACH). A killed daemon leaves
// its mount answering ENOTCONN until then.
package faultfs
