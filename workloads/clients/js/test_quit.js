// The protocol's SIGQUIT (docs/client-protocol.md, "When the driver goes
// wrong"): a driver the lab takes for hung names each process's
// operation in flight on stderr and goes on. node test_quit.js (needs no
// kafkajs); TestJsDriverQuit runs it.
'use strict'

const assert = require('assert')
const { spawn } = require('child_process')

let failed = 0
const hung = spawn(process.execPath, ['-e', `
  const { serve } = require('./isrlab_exec.js')
  const client = { name: () => 'fake', check: () => {},
    producer: async () => ({ send: () => new Promise(() => {}), close: async () => {} }) }
  serve(client).then((code) => process.exit(code))
`], { cwd: __dirname, stdio: ['pipe', 'pipe', 'pipe'] })
let out = ''
let errOut = ''
hung.stderr.on('data', (b) => { errOut += b })
hung.stdout.on('data', (b) => {
  out += b
  const n = out.split('\n').length - 1
  if (n === 2) {
    // The hello and open-producer are answered; the send never is.
    hung.stdin.write(JSON.stringify({ id: 2, process: 7, f: 'send', partition: 0, value: 'v', timeout_ms: 1000 }) + '\n')
    setTimeout(() => hung.kill('SIGQUIT'), 200)
    setTimeout(() => hung.stdin.end(), 400)
  }
})
hung.stdin.write(JSON.stringify({ type: 'hello', protocol: 1, bootstrap: [], topic: 't', partitions: 1, config: {} }) + '\n')
hung.stdin.write(JSON.stringify({ id: 1, process: 7, f: 'open-producer', timeout_ms: 1000 }) + '\n')
const guard = setTimeout(() => hung.kill('SIGKILL'), 60000)
hung.on('exit', (code, signal) => {
  clearTimeout(guard)
  try {
    assert.match(errOut, /SIGQUIT: operations in flight at /)
    assert.match(errOut, /process 7: send \(operation 2\) for \d+ ms/)
    assert.strictEqual(signal, null, `ended by ${signal}: ${errOut}`)
    console.log('ok   SIGQUIT names the operation in flight')
  } catch (e) {
    failed++
    console.log(`FAIL SIGQUIT: ${e.message}\nstderr: ${errOut}`)
  }
  process.exit(failed ? 1 : 0)
})
