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
// (securityOptions()). See outcome() for what each error means, and
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

const DRIVER_KEYS = new Set(['idempotent', 'retry', 'transactionalId', 'createPartitioner'])

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
    return ['security']
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

  async consumer(hello, proc, parts) {
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
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const c = new Consumer(consumer)
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => c.push(batch),
    })
    return c
  },
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

class Consumer {
  constructor(consumer) {
    this.consumer = consumer
    this.records = []
    this.waiters = []
  }

  push(batch) {
    for (const m of batch.messages) {
      this.records.push({ partition: batch.partition, offset: Number(m.offset), value: m.value === null ? '' : m.value.toString() })
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

serve(client).then((code) => process.exit(code), (e) => {
  process.stderr.write(String((e && e.stack) || e) + '\n')
  process.exit(2)
})
