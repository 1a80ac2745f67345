// The kafkajs driver's commit outcome table (docs/clients-under-faults.md,
// "kafkajs's group consumers"): node test_outcomes.js, with NODE_PATH
// holding kafkajs; TestKafkajsCommitOutcome runs it.
'use strict'

const assert = require('assert')
const kafkajs = require('kafkajs')
const { commitOutcome, unwritten } = require('./kafkajs_driver.js')

const asked = [{ partition: 0, offset: 42 }, { partition: 2, offset: 17 }]
const attempt = (err) => (err ? { ok: false, written: !unwritten(err), err } : { ok: true, written: true })
const crashed = Object.assign(new Error('the member crashed'), { name: 'IsrlabCrashed' })

const cases = [
  ['accepted', [attempt()], undefined, 'ok'],
  ['accepted after a lost answer', [attempt(new kafkajs.KafkaJSRequestTimeoutError('Request timed out')), attempt()], undefined, 'ok'],
  ['no attempt (not running)', [], undefined, 'fail'],
  ['no attempt (no coordinator)', [], new kafkajs.KafkaJSError('coordinator not found'), 'fail'],
  ['failed to connect', [attempt(new kafkajs.KafkaJSConnectionError('Failed to connect: connect ECONNREFUSED'))], undefined, 'fail'],
  ['connection timeout', [attempt(new kafkajs.KafkaJSConnectionError('Connection timeout'))], undefined, 'fail'],
  ['not connected', [attempt(new kafkajs.KafkaJSConnectionError('Not connected'))], undefined, 'fail'],
  ['crashed', [attempt(crashed)], crashed, 'fail'],
  ['closed in flight', [attempt(new kafkajs.KafkaJSConnectionClosedError('Closed connection'))], undefined, 'info'],
  ['connection error in flight', [attempt(new kafkajs.KafkaJSConnectionError('Connection error: ECONNRESET'))], undefined, 'info'],
  ['request timeout', [attempt(new kafkajs.KafkaJSRequestTimeoutError('Request OffsetCommit timed out'))], undefined, 'info'],
  ['rebalancing', [attempt(new kafkajs.KafkaJSProtocolError({ message: 'rebalancing', type: 'REBALANCE_IN_PROGRESS' }))], undefined, 'info'],
  ['not coordinator', [attempt(new kafkajs.KafkaJSProtocolError({ message: 'not coordinator', type: 'NOT_COORDINATOR_FOR_GROUP' }))], undefined, 'info'],
  ['written, then unwritten', [attempt(new kafkajs.KafkaJSRequestTimeoutError('timed out')), attempt(new kafkajs.KafkaJSConnectionError('Not connected'))], undefined, 'info'],
]

let failed = 0
for (const [name, attempts, err, want] of cases) {
  const [type, committed, text] = commitOutcome(asked, attempts, err)
  try {
    assert.strictEqual(type, want)
    assert.deepStrictEqual(committed, type === 'fail' ? [] : asked)
    assert.strictEqual(type === 'ok' ? text === '' : text !== '', true)
    console.log(`ok   ${name}: ${type} ${text}`)
  } catch (e) {
    failed++
    console.log(`FAIL ${name}: got ${type} ${JSON.stringify(committed)} ${text}, want ${want}`)
  }
}
process.exit(failed ? 1 : 0)
