// The kafkajs driver's commit outcome table (docs/clients-under-faults.md,
// "kafkajs's group consumers") and its transaction end table ("kafkajs's
// transactions (the txn workload)"): node test_outcomes.js, with
// NODE_PATH holding kafkajs; TestKafkajsCommitOutcome runs it.
'use strict'

const assert = require('assert')
const kafkajs = require('kafkajs')
const { commitOutcome, endOutcome, unwritten } = require('./kafkajs_driver.js')

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
// A transaction's end: [name, commit, error, EndTxn attempts' errors, want].
const waited = Object.assign(new Error('no answer within 100 ms'), { name: 'IsrlabWaitTimeout' })
const endAttempt = (err) => ({ written: !unwritten(err), err })
const refused = new kafkajs.KafkaJSConnectionError('Failed to connect: connect ECONNREFUSED')
const lost = new kafkajs.KafkaJSRequestTimeoutError('Request EndTxn timed out')
const fenced = new kafkajs.KafkaJSProtocolError({ message: 'fenced', type: 'INVALID_PRODUCER_EPOCH' })
const notCoordinator = new kafkajs.KafkaJSProtocolError({ message: 'not coordinator', type: 'NOT_COORDINATOR_FOR_GROUP' })
const noCoordinator = new kafkajs.KafkaJSGroupCoordinatorNotFound('no coordinator')
const ends = [
  ['commit returned', true, null, [], 'ok', false],
  ['abort returned', false, null, [], 'fail', false],
  ['commit: no coordinator found', true, noCoordinator, [], 'fail', true],
  ['commit: failed to connect', true, refused, [refused], 'fail', true],
  ['commit: request timeout', true, lost, [lost], 'info', true],
  ['commit: closed in flight', true, new kafkajs.KafkaJSConnectionClosedError('Closed connection'), [new kafkajs.KafkaJSConnectionClosedError('Closed connection')], 'info', true],
  ['commit: fenced', true, fenced, [fenced], 'info', true],
  ['commit: not coordinator', true, notCoordinator, [notCoordinator], 'info', true],
  ['commit: no answer in the wait', true, waited, [], 'info', true],
  ['abort: no coordinator found', false, noCoordinator, [], 'info', true],
  ['abort: request timeout', false, lost, [lost], 'info', true],
]
for (const [name, commit, err, errs, want, wantDone] of ends) {
  const [type, text, over] = endOutcome(commit, err, errs.map(endAttempt))
  try {
    assert.strictEqual(type, want)
    assert.strictEqual(over, wantDone)
    assert.strictEqual(err ? text !== '' : text === '', true)
    console.log(`ok   ${name}: ${type} ${over ? 'done ' : ''}${text}`)
  } catch (e) {
    failed++
    console.log(`FAIL ${name}: got ${type} ${over} ${text}, want ${want} ${wantDone}`)
  }
}

process.exit(failed ? 1 : 0)
