// The line protocol of isrlab's exec client (docs/client-protocol.md), for
// drivers in JavaScript (Node.js): the kafkajs reference driver uses it.
//
// A driver gives serve() a client: its name, a check of the lab's hello
// (throw Refused to refuse it), and producer(hello, proc) and
// consumer(hello, proc, partitions) that return objects with async
// send(partition, key, value, timeoutMs) -> [type, offset, error],
// poll(timeoutMs) -> [type, records, error] and close(). One that runs
// consumer groups names "queue" among its features() and has
// groupConsumer(hello, proc, group, autoCommit, intervalMs), whose member
// also has commit(offsets, timeoutMs) -> [type, committed, error],
// crash(), and takeEvents(), which hands over what happened to the
// member since (docs/client-protocol.md, "Consumer groups"). Each workload
// process runs its operations in order on a promise chain of its own, so
// that one process's blocked send does not hold another's poll; one
// completion is printed per operation. Started with --check, serve()
// answers the hello and exits: isrlab does that when a scenario loads.
'use strict'

const readline = require('readline')

const PROTOCOL = 1

class Refused extends Error {}

function print(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function done(op, type, extra) {
  const d = { id: op.id, process: op.process, type }
  for (const [k, v] of Object.entries(extra || {})) {
    if (v !== undefined && v !== null && v !== '') d[k] = v
  }
  return d
}

class Proc {
  constructor(client, hello) {
    this.client = client
    this.hello = hello
    this.handle = null
    this.chain = Promise.resolve()
  }

  push(op) {
    this.chain = this.chain.then(() => this.run(op))
    return this.chain
  }

  async run(op) {
    let d
    this.current = op
    this.since = Date.now()
    try {
      d = await this.do(op)
    } catch (e) {
      // A driver bug: say so; the record's fate is unknown.
      process.stderr.write(String((e && e.stack) || e) + '\n')
      // A record or a transaction end may have reached the brokers.
      d = done(op, ['send', 'poll', 'commit', 'produce', 'end'].includes(op.f) ? 'info' : 'fail', { error: `driver error: ${e && e.name}: ${e && e.message}` })
      if (op.f === 'end') d.done = true
    }
    this.current = null
    print(d)
  }

  async do(op) {
    const timeout = op.timeout_ms || 30000
    switch (op.f) {
      case 'open-producer':
        this.handle = await this.client.producer(this.hello, op.process)
        return done(op, 'ok')
      case 'open-consumer':
        this.handle = await this.client.consumer(this.hello, op.process, op.partitions || [], op.isolation === 'read_committed')
        return done(op, 'ok')
      case 'open-transactional-producer':
        this.handle = await this.client.transactor(this.hello, op.process, op.transactional_id, op.transaction_timeout_ms, op.partitions || [], timeout)
        return done(op, 'ok')
      case 'begin': {
        if (!this.handle) return done(op, 'fail', { error: 'begin before open-transactional-producer' })
        const [type, error] = await this.handle.begin()
        return done(op, type, { error })
      }
      case 'produce': {
        if (!this.handle) return done(op, 'fail', { offsets: op.records.map(() => -1), error: 'produce before open-transactional-producer' })
        const [type, offsets, error] = await this.handle.produce(op.records, timeout)
        return done(op, type, { offsets, error })
      }
      case 'end': {
        if (!this.handle) return done(op, 'fail', { error: 'end before open-transactional-producer' })
        const [type, error, over] = await this.handle.end(!!op.commit, timeout)
        return done(op, type, { error, done: over || undefined })
      }
      case 'open-group-consumer':
        this.handle = await this.client.groupConsumer(this.hello, op.process, op.group, !!op.auto_commit, op.auto_commit_interval_ms || 5000)
        return done(op, 'ok', { events: this.events() })
      case 'commit': {
        if (!this.handle) return done(op, 'fail', { error: 'commit before open-group-consumer' })
        const [type, committed, error] = await this.handle.commit(op.offsets || [], timeout)
        return done(op, type, { committed, error, events: this.events() })
      }
      case 'crash': {
        const h = this.handle
        this.handle = null
        if (h) await h.crash()
        return done(op, 'ok')
      }
      case 'send': {
        if (!this.handle) return done(op, 'fail', { error: 'send before open-producer' })
        const [type, offset, error] = await this.handle.send(op.partition, op.key || '', op.value, timeout)
        return done(op, type, { offset: type === 'ok' ? offset : undefined, error })
      }
      case 'poll': {
        if (!this.handle) return done(op, 'info', { error: 'poll before open-consumer' })
        const [type, records, error] = await this.handle.poll(timeout)
        return done(op, type, { records: records && records.length ? records : undefined, error, events: this.events() })
      }
      case 'close': {
        const h = this.handle
        await this.closeHandle()
        return done(op, 'ok', { events: this.events(h) })
      }
    }
    return done(op, 'fail', { error: 'unknown operation ' + op.f })
  }

  // events are a group member's events since the last operation, or
  // undefined.
  events(h) {
    h = h || this.handle
    const evs = h && h.takeEvents ? h.takeEvents() : []
    return evs.length ? evs : undefined
  }

  async closeHandle() {
    const h = this.handle
    this.handle = null
    if (h) {
      try {
        await h.close()
      } catch (e) {
        process.stderr.write(`close: ${e}\n`)
      }
    }
  }
}

// serve runs the protocol on stdin and stdout until stdin ends.
async function serve(client, argv) {
  argv = argv || process.argv.slice(2)
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  const lines = rl[Symbol.asyncIterator]()
  const first = await lines.next()
  if (first.done) return 0
  let hello
  try {
    hello = JSON.parse(first.value)
  } catch (e) {
    process.stderr.write(`the first line is not a hello: ${first.value}\n`)
    return 2
  }
  if (hello.type !== 'hello') {
    process.stderr.write(`the first line is not a hello: ${first.value}\n`)
    return 2
  }
  if (hello.protocol !== PROTOCOL) {
    print({ type: 'refused', error: `protocol ${hello.protocol}: this driver speaks ${PROTOCOL}` })
    return 0
  }
  const features = client.features ? client.features() : []
  let name
  try {
    name = client.name()
    for (const f of hello.features || []) {
      if (!features.includes(f)) throw new Refused(`this driver does not run the protocol's "${f}" feature`)
    }
    client.check(hello)
  } catch (e) {
    if (e instanceof Refused) {
      print({ type: 'refused', error: e.message })
      return 0
    }
    throw e
  }
  const procs = new Map()
  // A lab that takes the driver for hung sends SIGQUIT before it kills
  // it: each process's operation in flight, and for how long, goes to
  // stderr, which the run keeps (the event loop must be free to say it).
  process.on('SIGQUIT', () => {
    const now = Date.now()
    const lines = [`SIGQUIT: operations in flight at ${new Date(now).toISOString()}:`]
    for (const [n, p] of procs) {
      if (p.current) lines.push(`  process ${n}: ${p.current.f} (operation ${p.current.id}) for ${now - p.since} ms`)
    }
    process.stderr.write(lines.join('\n') + '\n')
  })
  print({ type: 'hello', client: name, pid: process.pid, features })
  if (argv.includes('--check')) return 0
  const pending = []
  for await (const line of lines) {
    let op
    try {
      op = JSON.parse(line)
    } catch (e) {
      process.stderr.write(`not an operation: ${line}\n`)
      return 2
    }
    let p = procs.get(op.process)
    if (!p) {
      p = new Proc(client, hello)
      procs.set(op.process, p)
    }
    pending.push(p.push(op))
    if (op.f === 'close') procs.delete(op.process)
  }
  // The lab closed stdin: the run is over.
  for (const p of procs.values()) pending.push(p.chain.then(() => p.closeHandle()))
  await Promise.race([Promise.allSettled(pending), new Promise((resolve) => setTimeout(resolve, 10000))])
  return 0
}

module.exports = { Refused, serve, done, PROTOCOL }
