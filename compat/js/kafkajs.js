// kafkajs doing one compatibility job for isrlab's compat tests
// (compat/script_test.go): the job is JSON on stdin, the result JSON on
// stdout, diagnostics on stderr.
'use strict'
const fs = require('fs')
const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

const log = (...args) => console.error(...args)

function readJob () {
  return new Promise((resolve, reject) => {
    let data = ''
    process.stdin.setEncoding('utf8')
    process.stdin.on('data', (c) => { data += c })
    process.stdin.on('end', () => resolve(JSON.parse(data)))
    process.stdin.on('error', reject)
  })
}

async function waitFor (what, cond, seconds = 60) {
  const end = Date.now() + seconds * 1000
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(what + ': not within ' + seconds + 's')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const text = (b) => (b == null ? null : b.toString())

function fromMessage (partition, m) {
  const headers = Object.entries(m.headers || {}).map(([key, value]) => ({ key, value: text(value) }))
  // kafkajs gives headers as an object: restore the order they were sent in.
  headers.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return { partition, offset: Number(m.offset), key: text(m.key), value: text(m.value), headers }
}

function toMessage (r) {
  const headers = {}
  for (const h of r.headers || []) headers[h.key] = h.value
  return { key: r.key, value: r.value, partition: r.partition, headers }
}

const groupOpts = { sessionTimeout: 6000, heartbeatInterval: 500, maxWaitTimeInMs: 200, rebalanceTimeout: 10000 }

async function produce (kafka, topic, records) {
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  const acks = []
  for (const r of records) {
    const [md] = await p.send({ topic, acks: -1, messages: [toMessage(r)] })
    acks.push({ partition: md.partition, offset: Number(md.baseOffset) })
  }
  await p.disconnect()
  return acks
}

class Member {
  constructor (kafka, job, name) {
    this.name = name
    this.records = []
    this.assigned = new Set()
    this.c = kafka.consumer(Object.assign({ groupId: job.group }, groupOpts))
    this.c.on(this.c.events.GROUP_JOIN, (e) => {
      this.assigned = new Set(e.payload.memberAssignment[job.topic] || [])
      log(name, 'assigned', [...this.assigned])
    })
    this.c.on(this.c.events.REBALANCING, () => {
      this.assigned = new Set()
      log(name, 'rebalancing')
    })
  }

  async start (topic) {
    await this.c.connect()
    await this.c.subscribe({ topic, fromBeginning: true })
    await this.c.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        this.records.push(fromMessage(partition, message))
        await this.c.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }])
      }
    })
  }
}

function splitDone (a, b, n) {
  if (a.size === 0 || b.size === 0) return false
  const all = new Set([...a, ...b])
  return all.size === n && a.size + b.size === n
}

// tlsOptions is the job's TLS as kafkajs's ssl option (Node's
// tls.connect options): the CA, and the client certificate and key when
// the job has them; undefined when the job is plaintext.
function tlsOptions (tls) {
  if (!tls) return undefined
  const ssl = { ca: [fs.readFileSync(tls.ca)] }
  if (tls.cert) {
    ssl.cert = fs.readFileSync(tls.cert)
    ssl.key = fs.readFileSync(tls.key)
  }
  return ssl
}

async function run (job) {
  const kafka = new Kafka({ clientId: 'isrlab-compat', brokers: job.bootstrap, logLevel: logLevel.WARN, ssl: tlsOptions(job.tls) })
  const topic = job.topic
  switch (job.capability) {
    case 'produce':
      return { acks: await produce(kafka, topic, job.records), idempotent: true }
    case 'consume': {
      // kafkajs consumes only in a group: one of its own, from the start.
      const m = new Member(kafka, Object.assign({}, job, { group: topic + '-reader' }), 'reader')
      await m.start(topic)
      await waitFor('consume', () => m.records.length >= job.records.length)
      await m.c.disconnect()
      return { records: m.records, not_offered: { assign: 'kafkajs reads only as a group member' } }
    }
    case 'groups': {
      const a = new Member(kafka, job, 'a')
      await a.start(topic)
      await waitFor('member a reads the topic', () => a.records.length >= job.records.length)
      const first = a.records.slice()
      const b = new Member(kafka, job, 'b')
      await b.start(topic)
      await waitFor('the partitions split', () => splitDone(a.assigned, b.assigned, job.partitions))
      const assignA = [...a.assigned].sort(); const assignB = [...b.assigned].sort()
      await produce(kafka, topic, job.after)
      const total = job.records.length + job.after.length
      await waitFor('a and b read what was produced after the split', () => a.records.length + b.records.length >= total)
      await a.c.disconnect()
      await b.c.disconnect()
      return { first, assign_a: assignA, assign_b: assignB, a: a.records.slice(first.length), b: b.records }
    }
    case 'offsets': {
      const admin = kafka.admin()
      await admin.connect()
      await admin.setOffsets({
        groupId: job.group,
        topic,
        partitions: Object.entries(job.commit).map(([p, o]) => ({ partition: Number(p), offset: String(o) }))
      })
      await admin.disconnect()
      const fresh = kafka.admin()
      await fresh.connect()
      const [got] = await fresh.fetchOffsets({ groupId: job.group, topics: [topic] })
      await fresh.disconnect()
      const committed = {}
      for (const p of got.partitions) committed[p.partition] = Number(p.offset)
      return { committed }
    }
    case 'admin': {
      const admin = kafka.admin()
      await admin.connect()
      const created = await admin.createTopics({
        waitForLeaders: true,
        topics: [{
          topic: job.create_topic,
          numPartitions: job.partitions,
          replicationFactor: 3,
          configEntries: Object.entries(job.configs).map(([name, value]) => ({ name, value }))
        }]
      })
      if (!created) throw new Error('createTopics: topic already existed')
      // A broker other than the one that answered the creation may not
      // know the topic yet (UNKNOWN_TOPIC_OR_PARTITION), in Kafka as here.
      let configs
      await waitFor('describeConfigs of ' + job.create_topic, async () => {
        let described
        try {
          described = await admin.describeConfigs({
            includeSynonyms: false,
            resources: [{ type: ConfigResourceTypes.TOPIC, name: job.create_topic }]
          })
        } catch (e) {
          if (e.type === 'UNKNOWN_TOPIC_OR_PARTITION') return false
          throw e
        }
        configs = {}
        for (const r of described.resources) {
          if (r.errorCode === 3) return false
          if (r.errorCode) throw new Error('describeConfigs: error ' + r.errorCode + ' ' + r.errorMessage)
          for (const e of r.configEntries) configs[e.configName] = e.configValue
        }
        return true
      }, 30)
      await admin.createPartitions({ topicPartitions: [{ topic: job.create_topic, count: job.grow_to }] })
      let partitions = 0
      // Other brokers learn of the new partitions shortly after the answer.
      await waitFor('metadata shows ' + job.grow_to + ' partitions', async () => {
        const md = await admin.fetchTopicMetadata({ topics: [job.create_topic] })
        partitions = md.topics[0].partitions.length
        return partitions === job.grow_to
      }, 30)
      const groups = (await admin.listGroups()).groups.map((g) => g.groupId)
      const [g] = (await admin.describeGroups([job.group])).groups
      const earliest = {}; const latest = {}
      for (const o of await admin.fetchTopicOffsets(topic)) {
        earliest[o.partition] = Number(o.low)
        latest[o.partition] = Number(o.high)
      }
      await admin.deleteTopics({ topics: [job.delete_topic] })
      await admin.disconnect()
      return {
        configs,
        partitions,
        groups,
        group_state: g.state,
        group_protocol_type: g.protocolType,
        members: g.members.length,
        earliest,
        latest
      }
    }
  }
  throw new Error('unknown capability ' + job.capability)
}

readJob().then(run).then((r) => {
  process.stdout.write(JSON.stringify(r) + '\n')
  process.exit(0)
}, (err) => {
  log(err && err.stack ? err.stack : err)
  process.exit(1)
})
