// isrlab's exec driver for kafkajs (Node.js).
//
//     workload: {client: kafkajs}    # isrlab runs: /usr/bin/node kafkajs_driver.js
//
// kafkajs is not a Debian package: node finds it through NODE_PATH (a
// node_modules directory holding it, e.g. compat/js/node_modules after
// `npm ci` there); without it the hello is refused, naming what is
// missing. Each producer process has a producer of its own and sends one
// record at a time, awaiting its answer; each consumer process is a
// consumer group of its own whose one member is given exactly its
// partitions (kafkajs has no manual assignment), read from their start,
// committing nothing. The hello's Kafka-named settings map to kafkajs's
// options; client.config takes kafkajs's own producer options
// (maxInFlightRequests, ...) as JSON values. On a secured cluster (the
// protocol's "security" feature) every client connects with the hello's
// security settings as kafkajs's ssl and sasl options
// (securityOptions()). With the protocol's "queue" feature (the queue
// workload) a group consumer process is a kafkajs consumer with the
// group's groupId, subscribed to the topic; see GroupConsumer for how
// its pushed batches become polls, how it commits and crashes, and
// commitOutcome() for what each commit error means. With the protocol's
// "txn" feature (the txn workload) a transactional producer process is a
// kafkajs producer with the process's transactionalId (idempotent, one
// request in flight), its transactions producer.transaction(), then
// transaction.send and transaction.commit or transaction.abort; see
// Transactor and endOutcome() for how each error is mapped. Consumers
// read read_committed (kafkajs's default, readUncommitted false). See
// outcome() for what each send error means, and
// docs/clients-under-faults.md.
'use strict'

const fs = require('fs')

const { Refused, serve } = require('./isrlab_exec.js')

let kafkajs = null
let importError = null
try {
  kafkajs = require('kafkajs')
} catch (e) {
  importError = e
}

const DRIVER_KEYS = new Set(['idempotent', 'retry', 'transactionalId', 'transactionTimeout', 'createPartitioner'])

// Protocol errors that hold on every attempt: the franz-go driver's list.
const REFUSALS = new Set(['MESSAGE_TOO_LARGE', 'INVALID_REQUIRED_ACKS', 'RECORD_LIST_TOO_LARGE', 'CORRUPT_MESSAGE',
  'INVALID_TOPIC_EXCEPTION', 'TOPIC_AUTHORIZATION_FAILED', 'CLUSTER_AUTHORIZATION_FAILED', 'UNSUPPORTED_FOR_MESSAGE_FORMAT'])

// outcome is the outcome of a send that ended with err: "fail" only when
// the record cannot have been written, else "info". sentOnce: retries is
// 0, so the error is the only attempt's.
function outcome(err, sentOnce) {
  // Nothing was sent: no metadata or broker for the partition, a
  // disconnected producer (kafkajs checks before writing a request).
  if (err instanceof kafkajs.KafkaJSBrokerNotFound || err instanceof kafkajs.KafkaJSMetadataNotLoaded ||
      (err.name === 'KafkaJSError' && /disconnected/i.test(err.message))) {
    return 'fail'
  }
  if (err instanceof kafkajs.KafkaJSProtocolError) {
    if (REFUSALS.has(err.type)) return 'fail'
    // NOT_ENOUGH_REPLICAS is answered before the append; a single
    // attempt refused so was not written.
    if (sentOnce && (err.type === 'NOT_ENOUGH_REPLICAS' || err.type === 'UNKNOWN_TOPIC_OR_PARTITION' || err.type === 'NOT_LEADER_FOR_PARTITION')) {
      return 'fail'
    }
  }
  // A connection that could not be opened wrote nothing; one closed or
  // timed out with the request in flight may have (KafkaJSConnectionClosedError,
  // KafkaJSRequestTimeoutError). KafkaJSNumberOfRetriesExceeded: the
  // attempts before the last may have been written.
  if (sentOnce && err instanceof kafkajs.KafkaJSConnectionError && !(err instanceof kafkajs.KafkaJSConnectionClosedError) &&
      /Failed to connect|Connection timeout/.test(err.message)) {
    return 'fail'
  }
  return 'info'
}

function errorText(err) {
  const cause = err.cause && err.cause !== err ? ` (caused by ${err.cause.name}: ${err.cause.message})` : ''
  return `${err.name}: ${err.message}${cause}`
}

function ownConfig(hello) {
  const out = {}
  for (const [k, v] of Object.entries(hello['client.config'] || {})) {
    try {
      out[k] = JSON.parse(v)
    } catch (e) {
      out[k] = v
    }
  }
  return out
}

function withTimeout(promise, ms) {
  let timer
  const t = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`no answer within ${ms} ms`), { name: 'IsrlabWaitTimeout' })), ms)
  })
  return Promise.race([promise, t]).finally(() => clearTimeout(timer))
}

// The mechanisms kafkajs has built in, by their Kafka names.
const MECHANISMS = { PLAIN: 'plain', 'SCRAM-SHA-256': 'scram-sha-256', 'SCRAM-SHA-512': 'scram-sha-512' }

// securityOptions are the hello's security settings (a secured cluster's)
// as kafkajs's ssl and sasl options: the PEM files are read here, as
// kafkajs takes their contents.
function securityOptions(hello) {
  const sec = hello.security
  if (!sec) return {}
  const protocol = (sec['security.protocol'] || 'PLAINTEXT').toUpperCase()
  const opts = {}
  if (protocol === 'SSL' || protocol === 'SASL_SSL') {
    const ssl = {}
    if (sec['ssl.ca.location']) ssl.ca = [fs.readFileSync(sec['ssl.ca.location'], 'utf8')]
    if (sec['ssl.certificate.location']) ssl.cert = fs.readFileSync(sec['ssl.certificate.location'], 'utf8')
    if (sec['ssl.key.location']) ssl.key = fs.readFileSync(sec['ssl.key.location'], 'utf8')
    if (sec['ssl.endpoint.identification.algorithm'] === 'none') ssl.checkServerIdentity = () => undefined
    opts.ssl = Object.keys(ssl).length ? ssl : true
  } else if (protocol !== 'PLAINTEXT' && protocol !== 'SASL_PLAINTEXT') {
    throw new Refused(`security.protocol ${protocol}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL`)
  }
  if (protocol === 'SASL_SSL' || protocol === 'SASL_PLAINTEXT') {
    const mechanism = MECHANISMS[sec['sasl.mechanism']]
    if (!mechanism) throw new Refused(`sasl.mechanism ${sec['sasl.mechanism']}: kafkajs's driver takes ${Object.keys(MECHANISMS).join(', ')}`)
    opts.sasl = { mechanism, username: sec['sasl.username'], password: sec['sasl.password'] }
  }
  return opts
}

const client = {
  name() {
    if (!kafkajs) return 'kafkajs'
    let version = '?'
    try {
      version = require('kafkajs/package.json').version
    } catch (e) {}
    return `kafkajs ${version} (Node.js ${process.versions.node})`
  },

  check(hello) {
    if (importError) {
      throw new Refused(`kafkajs is not installed for ${process.execPath}: it is not a Debian package; point NODE_PATH at a node_modules holding it (e.g. npm ci in isrlab's compat/js): ${importError.message.split('\n')[0]}`)
    }
    const c = hello.config
    if (c['enable.idempotence'] === 'true' && c['max.in.flight.requests.per.connection'] && Number(c['max.in.flight.requests.per.connection']) > 1) {
      throw new Refused('kafkajs sends one request at a time per connection when idempotent (max.in.flight.requests.per.connection must be 1)')
    }
    if (c['linger.ms'] && c['linger.ms'] !== '0') {
      throw new Refused('kafkajs has no linger: each send is its own request (linger.ms must be 0)')
    }
    for (const k of Object.keys(hello['client.config'] || {})) {
      if (DRIVER_KEYS.has(k)) throw new Refused(`client.config.${k}: set by the driver`)
    }
    securityOptions(hello)
  },

  features() {
    return ['txn', 'queue', 'security']
  },

  kafka(hello, proc) {
    const c = hello.config
    return new kafkajs.Kafka({
      clientId: `isrlab-exec-${proc}`,
      brokers: hello.bootstrap,
      logLevel: kafkajs.logLevel.NOTHING,
      requestTimeout: Number(c['request.timeout.ms']),
      connectionTimeout: 3000,
      ...securityOptions(hello),
    })
  },

  async producer(hello, proc) {
    const c = hello.config
    const retries = Number(c.retries)
    const idempotent = c['enable.idempotence'] === 'true'
    const opts = {
      idempotent,
      maxInFlightRequests: c['max.in.flight.requests.per.connection'] ? Number(c['max.in.flight.requests.per.connection']) : (idempotent ? 1 : undefined),
      // isrlab's retries 2147483647 is "until delivery.timeout.ms":
      // kafkajs has no delivery timeout, its retrier stops after
      // maxRetryTime, which takes the part.
      retry: retries === 0 ? { retries: 0 } : { retries: idempotent ? Number.MAX_SAFE_INTEGER : Math.min(retries, Number.MAX_SAFE_INTEGER), maxRetryTime: Number(c['delivery.timeout.ms']) },
      allowAutoTopicCreation: false,
      ...ownConfig(hello),
    }
    const p = this.kafka(hello, proc).producer(opts)
    await p.connect()
    const acks = { all: -1, '-1': -1, 1: 1, 0: 0 }[c.acks]
    return new Producer(p, hello.topic, acks, Number(c['request.timeout.ms']), retries === 0)
  },

  // consumer reads parts from their start. kafkajs's consumers read
  // read_committed unless given readUncommitted (Kafka.consumer in
  // src/index.js makes it the Fetch's isolationLevel), so readCommitted
  // only says so explicitly. kafkajs drops the records of aborted
  // transactions itself (src/consumer/filterAbortedMessages.js, from
  // the Fetch's aborted transactions; see docs/clients-under-faults.md
  // for what it lets through).
  async consumer(hello, proc, parts, readCommitted) {
    const { AssignerProtocol } = kafkajs
    const topic = hello.topic
    // One member, given exactly parts.
    const assigner = () => ({
      name: 'isrlab-assigned',
      version: 1,
      async assign({ members }) {
        return members.map((m) => ({
          memberId: m.memberId,
          memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 1, assignment: { [topic]: parts }, userData: Buffer.alloc(0) }),
        }))
      },
      protocol({ topics }) {
        return { name: 'isrlab-assigned', metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }) }
      },
    })
    const consumer = this.kafka(hello, proc).consumer({
      groupId: `isrlab-exec-${process.pid}-${proc}`,
      partitionAssigners: [assigner],
      sessionTimeout: 10000,
      heartbeatInterval: 1000,
      maxWaitTimeInMs: 100,
      retry: { retries: Number.MAX_SAFE_INTEGER },
      ...(readCommitted ? { readUncommitted: false } : {}),
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const c = new Consumer(consumer, topic)
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => c.push(batch),
    })
    return c
  },

  // transactor is a transactional producer process: a kafkajs producer
  // with txnId and txnTimeoutMs, idempotent with one request in flight
  // (kafkajs's requirements of a transactional producer), retrying its
  // sends until delivery.timeout.ms or the transaction's timeout, whichever
  // is shorter; its producer id is initialized now (InitProducerId, which
  // kafkajs otherwise sends at the first producer.transaction()) by a
  // transaction ended at once: an abort of a transaction that registered
  // no partition sends no EndTxn (eosManager.abort,
  // src/producer/eosManager/index.js). With parts, also a read_committed
  // consumer of them for the process's polls.
  async transactor(hello, proc, txnId, txnTimeoutMs, parts, timeoutMs) {
    const c = hello.config
    const p = this.kafka(hello, proc).producer({
      allowAutoTopicCreation: false,
      ...ownConfig(hello),
      transactionalId: txnId,
      transactionTimeout: Number(txnTimeoutMs),
      idempotent: true,
      maxInFlightRequests: 1,
      retry: { retries: Number.MAX_SAFE_INTEGER, maxRetryTime: Math.min(Number(c['delivery.timeout.ms']), Number(txnTimeoutMs)) },
    })
    const init = (async () => {
      await p.connect()
      const t = await p.transaction()
      await t.abort()
    })()
    try {
      await withTimeout(init, timeoutMs)
    } catch (e) {
      init.catch(() => {}).finally(() => p.disconnect().catch(() => {}))
      throw e
    }
    let cons = null
    if (parts.length) {
      try {
        cons = await this.consumer(hello, proc, parts, true)
      } catch (e) {
        await p.disconnect().catch(() => {})
        throw e
      }
    }
    return new Transactor(p, txnId, hello.topic, Number(c['request.timeout.ms']), cons)
  },

  // groupConsumer is a member of group (the protocol's
  // open-group-consumer): kafkajs's consumer with groupId, joining in
  // the background once run() starts it. With autoCommit kafkajs commits
  // on its own what the member resolved, the records handed to polls:
  // after each batch, every autoCommitInterval inside one, and before it
  // rejoins a rebalancing group.
  async groupConsumer(hello, proc, group, autoCommit, intervalMs) {
    const consumer = this.kafka(hello, proc).consumer({
      groupId: group,
      sessionTimeout: 10000,
      heartbeatInterval: 1000,
      maxWaitTimeInMs: 100,
    })
    const g = new GroupConsumer(consumer, hello.topic, autoCommit, Number(intervalMs))
    await consumer.connect()
    await consumer.subscribe({ topics: [hello.topic], fromBeginning: true })
    await consumer.run({
      autoCommit,
      autoCommitInterval: autoCommit ? Number(intervalMs) : null,
      eachBatchAutoResolve: false,
      eachBatch: (args) => g.batch(args),
    })
    return g
  },
}

// The most records a group member's poll hands over, as the other
// drivers' polls take.
const GROUP_POLL = 256

// How long a crash or close waits for kafkajs's disconnect (the lab
// takes a driver that answers 10 s past an operation's timeout for
// hung).
const END_WAIT = 5000

// unwritten tells whether an OffsetCommit attempt that failed with err
// can have reached the coordinator: kafkajs's Broker.offsetCommit
// (src/broker/index.js) sends through ConnectionPool.send
// (src/network/connectionPool.js), which opens the connection first;
// Connection.connect fails with "Failed to connect" or "Connection
// timeout", and Connection.send with "Not connected"
// (failIfNotConnected), before any byte of the request is written
// (src/network/connection.js). A refusal by the driver (the member
// crashed) writes nothing either. Anything else (a protocol error is an
// answer; a closed connection or a request timeout may follow the
// write) may have been written.
function unwritten(err) {
  if (err && err.name === 'IsrlabCrashed') return true
  return err instanceof kafkajs.KafkaJSConnectionError && !(err instanceof kafkajs.KafkaJSConnectionClosedError) &&
    /^(Failed to connect|Connection timeout|Not connected)/.test(err.message)
}

// commitOutcome is a commit's outcome [type, committed, error]: asked
// the offsets it asked for, attempts its OffsetCommit attempts as
// {ok, written, err}. ok: an attempt was accepted (kafkajs's
// OffsetCommit response parsers fail the request on any partition's
// error code, src/protocol/requests/offsetCommit). fail: no attempt can
// have been written (see unwritten(); a failed coordinator lookup,
// OffsetManager.getCoordinator in src/consumer/offsetManager/index.js,
// comes before any). info, with every offset asked for: an attempt
// that may have been written failed, even with a protocol error:
// Kafka's coordinator answers NOT_COORDINATOR or
// COORDINATOR_NOT_AVAILABLE also when the append to the offsets topic
// failed after the request was applied, and a retried attempt
// (Runner.commitOffsets' retrier, src/consumer/runner.js) may follow
// one that was applied.
function commitOutcome(asked, attempts, err) {
  if (attempts.some((a) => a.ok)) return ['ok', asked, '']
  const text = err ? errorText(err) : attempts.length ? errorText(attempts[attempts.length - 1].err) : 'kafkajs sent no OffsetCommit (its consumer is not running)'
  if (!attempts.some((a) => a.written)) return ['fail', [], text]
  return ['info', asked, text]
}

// members are the group members of this driver by kafkajs memberId:
// every OffsetCommit goes through Broker.prototype.offsetCommit
// (src/broker/index.js, called by OffsetManager.commitOffsets), which
// the driver wraps to see each attempt, its payload and its outcome
// (COMMIT_OFFSETS, src/consumer/instrumentationEvents.js, is emitted
// for accepted commits only), and to refuse those of a crashed member.
const members = new Map()
if (kafkajs) {
  const Broker = require('kafkajs/src/broker')
  const offsetCommit = Broker.prototype.offsetCommit
  Broker.prototype.offsetCommit = async function (req) {
    const m = members.get(req.memberId)
    if (!m) return offsetCommit.call(this, req)
    return m.offsetCommit(() => offsetCommit.call(this, req), req)
  }
}

// GroupConsumer is a consumer group member. kafkajs pushes: its
// runner (src/consumer/runner.js) hands each fetched batch to eachBatch
// (batch()), one at a time (partitionsConsumedConcurrently 1), and
// fetches no more until it returns. batch() queues the batch's records
// and waits until polls took them all, resolving (resolveOffset, with
// eachBatchAutoResolve false) the offsets of only what was handed out;
// while it waits it heartbeats (kafkajs heartbeats only from its run
// loop) and, with auto-commit, lets kafkajs commit when its interval is
// up (commitOffsetsIfNecessary). A heartbeat that finds the group
// rebalancing throws out of batch() after kafkajs's commit of what was
// resolved (Runner.heartbeat); the records not handed out are dropped,
// and the runner rejoins (REBALANCING, then GROUP_JOIN with the new
// assignment, each reported as an assignment).
//
// A batch whose records were all handed out ends at the member's next
// poll (release()), as an application returns from eachBatch once it
// processed them; with auto-commit kafkajs then commits
// (Runner.handleBatch calls autoCommitOffsets after every batch,
// whatever autoCommitInterval says).
//
// Each OffsetCommit attempt is seen through the Broker wrapper (above):
// with auto-commit each is reported as a commit event, as
// commitOutcome() gives it; a manual commit is consumer.commitOffsets,
// whose attempts make its outcome. A crash is refused before anything
// is written from then on, and the member then disconnects (leaving the
// group). A close ends the batch running, after which kafkajs commits
// what was handed out (with auto-commit; reported as the member's
// commit), then disconnects.
class GroupConsumer {
  constructor(consumer, topic, autoCommit, intervalMs) {
    Object.assign(this, { consumer, topic, autoCommit })
    // How often a waiting batch() heartbeats and asks kafkajs whether
    // its auto-commit interval is up, besides after each poll.
    this.tick = autoCommit ? Math.min(1000, intervalMs) : 1000
    this.evs = []
    this.batches = [] // batches waiting for polls: {partition, messages, at, released, resolveOffset, wake}
    this.waiters = []
    this.assigned = []
    this.memberId = null
    this.manual = null // the attempts of the manual commit running
    this.crashed = false
    this.stopping = false
    const { GROUP_JOIN, REBALANCING } = consumer.events
    consumer.on(GROUP_JOIN, ({ payload }) => {
      this.memberId = payload.memberId
      members.set(payload.memberId, this)
      this.assign((payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b))
    })
    consumer.on(REBALANCING, () => this.assign([]))
  }

  assign(parts) {
    this.assigned = parts
    if (!this.crashed) this.evs.push({ event: 'assigned', partitions: parts })
  }

  takeEvents() {
    return this.evs.splice(0)
  }

  // offsetCommit runs one OffsetCommit attempt of this member (send) and
  // records its outcome.
  async offsetCommit(send, req) {
    const attempts = this.manual
    if (this.crashed) {
      const err = Object.assign(new Error('the member crashed: the driver writes no commit of it'), { name: 'IsrlabCrashed' })
      if (attempts) attempts.push({ ok: false, written: false, err })
      throw err
    }
    const asked = []
    for (const t of req.topics) {
      if (t.topic !== this.topic) continue
      for (const p of t.partitions) asked.push({ partition: Number(p.partition), offset: Number(p.offset) })
    }
    asked.sort((a, b) => a.partition - b.partition)
    let a
    try {
      const r = await send()
      a = { ok: true, written: true }
      return r
    } catch (err) {
      a = { ok: false, written: !unwritten(err), err }
      throw err
    } finally {
      if (attempts) {
        attempts.push(a)
      } else if (!this.crashed && asked.length) {
        const [type, committed, error] = commitOutcome(asked, [a])
        this.evs.push({ event: 'committed', type, committed, error })
      }
    }
  }

  // batch is kafkajs's eachBatch: see the class comment.
  async batch({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, isRunning, isStale }) {
    if (batch.topic !== this.topic || this.crashed || this.stopping) return
    const b = { partition: batch.partition, messages: batch.messages, at: 0, released: false, resolveOffset, wake: null }
    this.batches.push(b)
    for (const w of this.waiters.splice(0)) w()
    try {
      while (!b.released && isRunning() && !isStale() && !this.crashed && !this.stopping) {
        await new Promise((resolve) => {
          const t = setTimeout(resolve, this.tick)
          b.wake = () => { clearTimeout(t); resolve() }
        })
        b.wake = null
        if (this.crashed || this.stopping) break
        await heartbeat()
        if (this.autoCommit) await commitOffsetsIfNecessary()
      }
    } finally {
      const i = this.batches.indexOf(b)
      if (i >= 0) this.batches.splice(i, 1)
    }
  }

  // take hands out at most GROUP_POLL queued records, resolving each
  // batch's offsets up to the last one handed out.
  take() {
    const records = []
    for (const b of this.batches) {
      if (records.length >= GROUP_POLL) break
      const n = Math.min(b.messages.length - b.at, GROUP_POLL - records.length)
      if (n <= 0) continue
      for (const m of b.messages.slice(b.at, b.at + n)) {
        records.push({ partition: b.partition, offset: Number(m.offset), value: m.value === null ? '' : m.value.toString() })
      }
      b.at += n
      const last = b.messages[b.at - 1].offset
      b.resolveOffset(last)
      if (b.wake) b.wake()
    }
    return records
  }

  // release ends the batches whose records were all handed out: the
  // member asks for more, as a kafkajs application returns from
  // eachBatch once it processed the batch.
  release() {
    for (const b of this.batches) {
      if (b.at >= b.messages.length && !b.released) {
        b.released = true
        if (b.wake) b.wake()
      }
    }
  }

  async poll(timeoutMs) {
    this.release()
    let records = this.take()
    if (records.length === 0) {
      await new Promise((resolve) => {
        const t = setTimeout(resolve, timeoutMs)
        this.waiters.push(() => { clearTimeout(t); resolve() })
      })
      records = this.take()
    }
    return ['ok', records, '']
  }

  async commit(offsets, timeoutMs) {
    const asked = offsets.map((o) => ({ partition: o.partition, offset: o.offset })).sort((a, b) => a.partition - b.partition)
    if (!asked.length) return ['fail', [], 'nothing to commit']
    if (this.manual) return ['fail', [], 'an earlier commit is still running: no commit started']
    // The attempts are this commit's until kafkajs's call ends, even
    // past the wait.
    const attempts = this.manual = []
    const call = this.consumer.commitOffsets(asked.map((o) => ({ topic: this.topic, partition: o.partition, offset: String(o.offset) })))
    call.then(() => {}, () => {}).finally(() => { if (this.manual === attempts) this.manual = null })
    try {
      await withTimeout(call, timeoutMs)
    } catch (e) {
      if (e.name === 'IsrlabWaitTimeout') return ['info', asked, errorText(e)]
      return commitOutcome(asked, attempts, e)
    }
    return commitOutcome(asked, attempts)
  }

  stopBatches() {
    for (const b of this.batches) if (b.wake) b.wake()
    this.batches = []
  }

  async crash() {
    this.crashed = true
    this.stopBatches()
    await this.end()
  }

  // end disconnects the consumer (Runner.stop: the batch running ends,
  // then LeaveGroup), waiting for it at most END_WAIT: past that the
  // driver answers and kafkajs goes on stopping. The member stays in
  // members (under each memberId it had), so that a late attempt of a
  // crashed member is still refused.
  async end() {
    try {
      await withTimeout(this.consumer.disconnect(), END_WAIT)
    } catch (e) {
      if (e.name !== 'IsrlabWaitTimeout') throw e
      process.stderr.write(`disconnect: ${errorText(e)}\n`)
    }
  }

  async close() {
    if (this.crashed) return
    this.stopping = true
    this.stopBatches()
    await this.end()
    if (this.assigned.length) this.assign([])
  }
}

// ending holds, by transactionalId, the EndTxn attempts ({written, err})
// of the commit or abort running: kafkajs's eosManager.commit and abort
// (src/producer/eosManager/index.js) find the transaction coordinator
// (cluster.findGroupCoordinator, retried) and then send one EndTxn
// through Broker.prototype.endTxn (src/broker/index.js), never retried,
// which the driver wraps to see whether it was reached and how it
// failed.
const ending = new Map()
if (kafkajs) {
  const Broker = require('kafkajs/src/broker')
  const endTxn = Broker.prototype.endTxn
  Broker.prototype.endTxn = async function (req) {
    const attempts = ending.get(req.transactionalId)
    try {
      return await endTxn.call(this, req)
    } catch (err) {
      if (attempts) attempts.push({ written: !unwritten(err), err })
      throw err
    }
  }
}

// endOutcome is a commit's (commit) or abort's outcome [type, error,
// done] from err, the error transaction.commit() or abort() ended with
// (none: it returned), and attempts, its failed EndTxn attempts.
//
// ok: a commit that returned (kafkajs's EndTxn response parser fails the
// request on an error code, src/protocol/requests/endTxn). fail: an
// abort that returned, and a commit whose EndTxn was never written: it
// failed before kafkajs sent one (finding the coordinator, or a
// connection that could not be opened: unwritten()), so the transaction
// cannot have committed. info: any other error of a commit, even a
// protocol error (Kafka's transaction coordinator answers
// NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE also when it could not
// finish appending a PrepareCommit it had begun), a closed connection or
// a request timeout with the EndTxn in flight, and no answer within the
// wait; and any error of an abort (not confirmed). After any error the
// producer is done: kafkajs left its state machine in COMMITTING or
// ABORTING (src/producer/eosManager/transactionStateMachine.js), where
// it takes neither another commit or abort nor a new transaction
// (producer.transaction's beginTransaction wants READY), so the process
// ends and the lab goes on with a new one.
function endOutcome(commit, err, attempts) {
  if (!err) return [commit ? 'ok' : 'fail', '', false]
  const what = commit ? 'commit' : 'abort'
  const text = `${what}: ${errorText(err)}`
  // No attempt recorded: the error came before Broker.endTxn was called.
  if (commit && err.name !== 'IsrlabWaitTimeout' && !attempts.some((a) => a.written)) {
    return ['fail', `${text} (no EndTxn was written)`, true]
  }
  return ['info', text, true]
}

// Transactor is a transactional producer process: its kafkajs producer,
// its producer id initialized, the transaction running (null between
// transactions), and its read_committed consumer for read-process-write
// transactions (null without).
class Transactor {
  constructor(p, txnId, topic, requestTimeout, cons) {
    Object.assign(this, { p, txnId, topic, requestTimeout, cons })
    this.txn = null
  }

  async begin() {
    try {
      this.txn = await this.p.transaction()
    } catch (e) {
      return ['fail', errorText(e)]
    }
    return ['ok', '']
  }

  async poll(timeoutMs) {
    if (!this.cons) return ['info', [], 'the producer was opened without a consumer']
    return this.cons.poll(timeoutMs)
  }

  // produce sends records in the transaction one at a time (one
  // transaction.send each, acks=all, awaiting its answer), each one's
  // offset its partition's baseOffset, until one fails or timeoutMs is
  // up: ok only when every record was acknowledged. The send's fail and
  // info differ as outside transactions (outcome()); the lab aborts
  // either way.
  async produce(records, timeoutMs) {
    const offsets = records.map(() => -1)
    if (!this.txn) return ['fail', offsets, 'produce outside a transaction']
    const sends = (async () => {
      for (const [i, r] of records.entries()) {
        const res = await this.txn.send({ topic: this.topic, acks: -1, timeout: this.requestTimeout,
          messages: [{ key: r.key || null, value: r.value, partition: r.partition }] })
        const md = res && res.find((m) => m.partition === r.partition)
        offsets[i] = md && md.baseOffset !== undefined ? Number(md.baseOffset) : -1
        if (offsets[i] < 0) throw Object.assign(new Error(`no offset for record ${i}`), { name: 'IsrlabNoOffset' })
      }
    })()
    try {
      await withTimeout(sends, timeoutMs)
    } catch (e) {
      sends.catch(() => {})
      if (e.name === 'IsrlabWaitTimeout' || e.name === 'IsrlabNoOffset') return ['info', offsets, errorText(e)]
      return [outcome(e, false), offsets, errorText(e)]
    }
    return ['ok', offsets, '']
  }

  // end commits or aborts the transaction: endOutcome() maps the result.
  // A call still running past timeoutMs goes on in kafkajs; its
  // attempts stay recorded until it ends.
  async end(commit, timeoutMs) {
    const txn = this.txn
    this.txn = null
    if (!txn) return ['fail', 'end outside a transaction', false]
    const attempts = []
    ending.set(this.txnId, attempts)
    const call = commit ? txn.commit() : txn.abort()
    call.catch(() => {}).finally(() => { if (ending.get(this.txnId) === attempts) ending.delete(this.txnId) })
    try {
      await withTimeout(call, timeoutMs)
    } catch (e) {
      return endOutcome(commit, e, attempts)
    }
    return endOutcome(commit, null, attempts)
  }

  // close disconnects the producer and the consumer: a transaction left
  // open is aborted by its coordinator at the transaction's timeout.
  async close() {
    if (this.cons) await this.cons.close().catch((e) => process.stderr.write(`close: ${errorText(e)}\n`))
    await withTimeout(this.p.disconnect(), END_WAIT).catch((e) => process.stderr.write(`disconnect: ${errorText(e)}\n`))
  }
}

class Producer {
  constructor(p, topic, acks, timeout, sentOnce) {
    Object.assign(this, { p, topic, acks, timeout, sentOnce })
  }

  async send(partition, key, value, timeoutMs) {
    try {
      const res = await withTimeout(this.p.send({ topic: this.topic, acks: this.acks, timeout: this.timeout, messages: [{ key, value, partition }] }), timeoutMs)
      const md = res && res.find((r) => r.partition === partition)
      const off = md && md.baseOffset !== undefined ? Number(md.baseOffset) : -1
      return ['ok', off >= 0 && this.acks !== 0 ? off : undefined, '']
    } catch (e) {
      if (e.name === 'IsrlabWaitTimeout') return ['info', undefined, errorText(e)]
      return [outcome(e, this.sentOnce), undefined, errorText(e)]
    }
  }

  async close() {
    await this.p.disconnect()
  }
}

// Consumer is a consumer process: a group of one, committing nothing.
// When kafkajs rejoins its group (a session lost, the group's
// coordinator moved, as when a broker is killed), it starts again where
// the group has no committed offset, at each partition's start
// (fromBeginning); the driver seeks each partition to the offset after
// the last record it handed over (consumer.seek, after GROUP_JOIN) and
// drops any record before it fetched meanwhile, as an application
// keeping its own positions would, so that polls go on where they were.
class Consumer {
  constructor(consumer, topic) {
    this.consumer = consumer
    this.records = []
    this.waiters = []
    this.next = new Map() // partition -> the offset after the last record pushed
    consumer.on(consumer.events.GROUP_JOIN, () => {
      for (const [partition, offset] of this.next) {
        try {
          consumer.seek({ topic, partition, offset: String(offset) })
        } catch (e) {
          process.stderr.write(`seek: ${errorText(e)}\n`)
        }
      }
    })
  }

  push(batch) {
    const next = this.next.get(batch.partition) || 0
    for (const m of batch.messages) {
      const offset = Number(m.offset)
      if (offset < next) continue
      this.records.push({ partition: batch.partition, offset, value: m.value === null ? '' : m.value.toString() })
      this.next.set(batch.partition, offset + 1)
    }
    for (const w of this.waiters.splice(0)) w()
  }

  async poll(timeoutMs) {
    if (this.records.length === 0) {
      await new Promise((resolve) => {
        const t = setTimeout(resolve, Math.min(timeoutMs, 1000))
        this.waiters.push(() => { clearTimeout(t); resolve() })
      })
    }
    return ['ok', this.records.splice(0, 1000), '']
  }

  async close() {
    await this.consumer.disconnect()
  }
}

if (require.main === module) {
  serve(client).then((code) => process.exit(code), (e) => {
    process.stderr.write(String((e && e.stack) || e) + '\n')
    process.exit(2)
  })
} else {
  // For the driver's table test, test_outcomes.js.
  module.exports = { commitOutcome, unwritten, endOutcome }
}
