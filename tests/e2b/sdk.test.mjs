// The unmodified E2B SDK (the `e2b` npm package, pinned in package.json)
// against agentbox's E2B front. Run by tests/e2e/e2b_test.go, which starts
// `agentbox serve --e2b-listen ADDR --template base=IMAGE` and sets:
//
//   E2B_API_URL, E2B_SANDBOX_URL  http://ADDR (the control and data plane)
//   E2B_API_KEY                   the daemon's token (--token-file)
//   AGENTBOX_E2B_CREATED          a sandbox made by `agentbox create --template base`
//   AGENTBOX_E2B_RUN              a word unique to this run (metadata filters)
//
// Two guests only (TCG is slow): sandbox `a`, made here, carries the
// command, file, terminal, pause and list tests in order; the one made by
// `agentbox create` is connected to, used, and left to expire by its
// timeout. The tests of one file run one after another (node:test), so
// later tests may rely on earlier ones' state: each says what it needs.

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'

import {
  Sandbox,
  CommandExitError,
  AuthenticationError,
  NotFoundError,
  SandboxError,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  TemplateError,
} from 'e2b'

const created = process.env.AGENTBOX_E2B_CREATED
const run = process.env.AGENTBOX_E2B_RUN
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'AGENTBOX_E2B_CREATED', 'AGENTBOX_E2B_RUN']) {
  if (!process.env[v]) throw new Error(`${v} is not set: run these tests through tests/e2e/e2b_test.go (go test -run TestE2BSDK ./tests/e2e)`)
}

// TCG guests on a shared CI host: generous request timeouts, no timed
// assertions.
const slow = { requestTimeoutMs: 180_000 }
const enc = new TextEncoder()
const dec = new TextDecoder()

/** until polls cond every 100 ms until it is truthy or ms pass. */
async function until(what, cond, ms = 60_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

let a // the sandbox the SDK creates

before(async () => {
  a = await Sandbox.create('base', {
    metadata: { suite: run, role: 'main' },
    envs: { SANDBOX_ENV: 'from-create', SHADOWED: 'create' },
    timeoutMs: 1_800_000,
    ...slow,
  })
})

after(async () => {
  if (a) await Sandbox.kill(a.sandboxId).catch(() => {})
})

// --- Errors that need no guest ---------------------------------------------

test('a wrong API key is an AuthenticationError', async () => {
  const wrong = process.env.E2B_API_KEY + 'x'
  await assert.rejects(Sandbox.list({ apiKey: wrong }).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.create('base', { apiKey: wrong, ...slow }), AuthenticationError)
  await assert.rejects(Sandbox.connect(a.sandboxId, { apiKey: wrong, ...slow }), AuthenticationError)
})

test('an unknown sandbox is a NotFoundError', async () => {
  await assert.rejects(Sandbox.connect('000000000000', slow), NotFoundError)
  await assert.rejects(Sandbox.getInfo('000000000000'), NotFoundError)
  assert.equal(await Sandbox.kill('000000000000'), false)
})

test('an unknown template is a 404 naming the known ones', async () => {
  await assert.rejects(Sandbox.create('no-such-template', slow), (err) => {
    assert.ok(err instanceof SandboxError, `${err?.name}: ${err?.message}`)
    assert.equal(err.statusCode, 404)
    assert.match(err.message, /no-such-template/)
    assert.match(err.message, /\bbase\b/)
    return true
  })
})

// --- Sandbox a: create, info ----------------------------------------------

test('create: the sandbox runs the template and reports it', async () => {
  const info = await a.getInfo()
  assert.equal(info.sandboxId, a.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: run, role: 'main' })
  assert.ok(info.cpuCount >= 1 && info.memoryMB >= 256, JSON.stringify(info))
  assert.ok(info.endAt > info.startedAt)
})

// --- Commands --------------------------------------------------------------

test('commands.run: stdout and stderr, separately and through the callbacks', async () => {
  const out = []
  const err = []
  const r = await a.commands.run('echo out1; echo err1 >&2; echo out2', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => err.push(d),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out1\nout2\n')
  assert.equal(r.stderr, 'err1\n')
  assert.equal(out.join(''), 'out1\nout2\n')
  assert.equal(err.join(''), 'err1\n')
})

test('commands.run: a non-zero exit is a CommandExitError with the code and output', async () => {
  await assert.rejects(a.commands.run('echo partial; echo bad >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.stderr, 'bad\n')
    return true
  })
})

test('commands.run: env, cwd and user', async () => {
  assert.equal((await a.commands.run('echo "$FOO-$BAR"', { envs: { FOO: 'foo', BAR: 'b a r' } })).stdout, 'foo-b a r\n')
  // Sandbox.create's envs are every command's; a command's own win.
  assert.equal((await a.commands.run('echo "$SANDBOX_ENV $SHADOWED"')).stdout, 'from-create create\n')
  assert.equal((await a.commands.run('echo "$SANDBOX_ENV $SHADOWED"', { envs: { SHADOWED: 'command' } })).stdout, 'from-create command\n')
  assert.equal((await a.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await a.commands.run('id -un', { user: 'root' })).stdout, 'root\n')
  assert.equal((await a.commands.run('id -un', { user: 'user' })).stdout, 'user\n')
  assert.equal((await a.commands.run('id -u', { user: 'root' })).stdout, '0\n')
})

test('commands.run: stdin sent to a background command, then closed', async () => {
  const h = await a.commands.run('cat; echo " [eof]"', { background: true, stdin: true })
  await h.sendStdin('hello ')
  await a.commands.sendStdin(h.pid, enc.encode('stdin'))
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.stdout, 'hello stdin [eof]\n')
})

test('background command: listed, connected to from a second client, killed', async () => {
  const out = []
  const h = await a.commands.run('echo started; exec sleep 600', { background: true, onStdout: (d) => out.push(d) })
  assert.ok(Number.isInteger(h.pid) && h.pid > 0)
  await until('the background command\'s output', () => out.join('') === 'started\n')

  const listed = (await a.commands.list()).find((p) => p.pid === h.pid)
  assert.ok(listed, 'the background command is not listed')
  assert.equal(listed.cmd, '/bin/bash')
  assert.deepEqual(listed.args, ['-l', '-c', 'echo started; exec sleep 600'])

  // A second client connects to the running sandbox and to the command.
  const b = await Sandbox.connect(a.sandboxId, slow)
  assert.equal(b.sandboxId, a.sandboxId)
  const h2 = await b.commands.connect(h.pid)
  assert.equal(h2.pid, h.pid)
  assert.equal(await b.commands.kill(h.pid), true)
  await assert.rejects(h2.wait(), CommandExitError)
  await assert.rejects(h.wait(), CommandExitError)
  await until('the killed command to leave the list', async () => !(await a.commands.list()).some((p) => p.pid === h.pid))
  assert.equal(await a.commands.kill(h.pid), false)
})

// --- Files -----------------------------------------------------------------

test('files: write and read text', async () => {
  assert.equal(await a.files.makeDir('/tmp/e2b'), true)
  assert.equal(await a.files.makeDir('/tmp/e2b'), false)
  const w = await a.files.write('/tmp/e2b/hello.txt', 'hello, wörld\n')
  assert.equal(w.name, 'hello.txt')
  assert.equal(w.path, '/tmp/e2b/hello.txt')
  assert.equal(await a.files.read('/tmp/e2b/hello.txt'), 'hello, wörld\n')
  assert.equal((await a.commands.run('cat /tmp/e2b/hello.txt')).stdout, 'hello, wörld\n')
  await assert.rejects(a.files.read('/tmp/e2b/missing.txt'), FileNotFoundError)
})

test('files: 20 MiB of binary, byte-exact both ways', async () => {
  const data = randomBytes(20 << 20)
  const sum = createHash('sha256').update(data).digest('hex')
  await a.files.write('/tmp/e2b/blob.bin', new Blob([data]), slow)
  assert.equal((await a.commands.run('sha256sum /tmp/e2b/blob.bin')).stdout, `${sum}  /tmp/e2b/blob.bin\n`)
  const back = await a.files.read('/tmp/e2b/blob.bin', { format: 'bytes', ...slow })
  assert.equal(back.length, data.length)
  assert.ok(Buffer.from(back.buffer, back.byteOffset, back.length).equals(data), 'the bytes read back differ')
})

test('files: list, exists, rename, remove', async () => {
  await a.files.makeDir('/tmp/e2b/sub/deeper')
  const names = (await a.files.list('/tmp/e2b')).map((e) => `${e.name}:${e.type}`).sort()
  assert.deepEqual(names, ['blob.bin:file', 'hello.txt:file', 'sub:dir'])
  const entry = (await a.files.list('/tmp/e2b')).find((e) => e.name === 'hello.txt')
  assert.equal(entry.type, FileType.FILE)
  assert.equal(entry.path, '/tmp/e2b/hello.txt')
  assert.equal(entry.size, 14)

  assert.equal(await a.files.exists('/tmp/e2b/hello.txt'), true)
  assert.equal(await a.files.exists('/tmp/e2b/nope'), false)
  const moved = await a.files.rename('/tmp/e2b/hello.txt', '/tmp/e2b/sub/moved.txt')
  assert.equal(moved.path, '/tmp/e2b/sub/moved.txt')
  assert.equal(await a.files.exists('/tmp/e2b/hello.txt'), false)
  assert.equal(await a.files.read('/tmp/e2b/sub/moved.txt'), 'hello, wörld\n')

  await a.files.remove('/tmp/e2b/blob.bin')
  await a.files.remove('/tmp/e2b/sub')
  assert.equal(await a.files.exists('/tmp/e2b/blob.bin'), false)
  assert.equal(await a.files.exists('/tmp/e2b/sub'), false)
  assert.deepEqual(await a.files.list('/tmp/e2b'), [])
})

test('files: watchDir reports a file created in the directory', async () => {
  await a.files.makeDir('/tmp/e2b/w')
  const events = []
  const w = await a.files.watchDir('/tmp/e2b/w', (ev) => events.push(ev))
  try {
    await a.commands.run('echo x > /tmp/e2b/w/new.txt')
    await until('a create event for new.txt', () =>
      events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE))
  } finally {
    await w.stop()
  }
})

// --- envdVersion: the SDK's feature gates ----------------------------------

test('envdVersion: the gates it passes work, those it does not are refused by the SDK', async () => {
  // 0.5.7: octet-stream uploads, plain and gzip-encoded.
  const w1 = await a.files.write('/tmp/e2b/octet.txt', 'octet\n', { useOctetStream: true })
  assert.equal(w1.path, '/tmp/e2b/octet.txt')
  await a.files.write('/tmp/e2b/gz.txt', 'gzipped\n', { gzip: true })
  assert.equal((await a.commands.run('cat /tmp/e2b/octet.txt /tmp/e2b/gz.txt')).stdout, 'octet\ngzipped\n')
  assert.equal(await a.files.read('/tmp/e2b/gz.txt', { gzip: true }), 'gzipped\n')
  await a.commands.run('rm /tmp/e2b/octet.txt /tmp/e2b/gz.txt')

  // 0.1.4: recursive watch (names relative to the watched directory).
  await a.files.makeDir('/tmp/e2b/rw/sub')
  const events = []
  const w = await a.files.watchDir('/tmp/e2b/rw', (ev) => events.push(ev), { recursive: true })
  try {
    await a.commands.run('echo x > /tmp/e2b/rw/sub/deep.txt')
    await until('a create event for sub/deep.txt', () =>
      events.some((e) => e.name === 'sub/deep.txt' && e.type === FilesystemEventType.CREATE))
  } finally {
    await w.stop()
  }
  await a.files.remove('/tmp/e2b/rw')

  // 0.1.5 and 0.2.4: metrics, with the disk's.
  // One sample once the daemon has sampled the running sandbox (every
  // few seconds); its CPU count and memory are the sandbox's.
  const info = await a.getInfo()
  const m = await until('a metrics sample', async () => {
    const got = await a.getMetrics()
    return got.length > 0 && got
  })
  assert.equal(m.length, 1, JSON.stringify(m))
  assert.ok(info.cpuCount >= 1 && info.memoryMB >= 128, JSON.stringify(info))
  assert.equal(m[0].cpuCount, info.cpuCount, JSON.stringify(m[0]))
  assert.equal(m[0].memTotal, info.memoryMB * 2 ** 20, JSON.stringify(m[0]))
  assert.ok(m[0].memUsed > 0 && m[0].diskTotal > 0, JSON.stringify(m[0]))

  // Not advertised: file metadata (0.6.2) and entries in watch events
  // (0.6.3): the SDK refuses them before sending anything.
  await assert.rejects(a.files.write('/tmp/e2b/meta.txt', 'x', { metadata: { k: 'v' } }), TemplateError)
  await assert.rejects(a.files.watchDir('/tmp/e2b', () => {}, { includeEntry: true }), TemplateError)
  assert.equal(await a.files.exists('/tmp/e2b/meta.txt'), false)
})

// --- Terminal --------------------------------------------------------------

test('pty: create, sendInput, resize', async () => {
  let screen = ''
  const h = await a.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += dec.decode(d, { stream: true }) } })
  await a.pty.sendInput(h.pid, enc.encode('stty size; echo "[$TERM]"\n'))
  await until('stty size 24 80 on the terminal', () => screen.includes('24 80') && screen.includes('[xterm-256color]'))
  await a.pty.resize(h.pid, { cols: 100, rows: 30 })
  await a.pty.sendInput(h.pid, enc.encode('stty size\n'))
  await until('stty size 30 100 after the resize', () => screen.includes('30 100'))
  await a.pty.sendInput(h.pid, enc.encode('exit 0\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
})

// --- List ------------------------------------------------------------------

test('Sandbox.list filters by metadata', async () => {
  const mine = await Sandbox.list({ query: { metadata: { suite: run } } }).nextItems()
  assert.deepEqual(mine.map((s) => s.sandboxId), [a.sandboxId])
  assert.deepEqual(mine[0].metadata, { suite: run, role: 'main' })
  assert.equal(mine[0].templateId, 'base')
  const both = await Sandbox.list({ query: { metadata: { suite: run, role: 'main' } } }).nextItems()
  assert.deepEqual(both.map((s) => s.sandboxId), [a.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { suite: run, role: 'other' } } }).nextItems()
  assert.deepEqual(none, [])
  const all = await Sandbox.list({ query: { state: ['running'] } }).nextItems()
  assert.deepEqual(all.map((s) => s.sandboxId).sort(), [a.sandboxId, created].sort())
})

// --- The sandbox `agentbox create` made ------------------------------------

test('a sandbox made by `agentbox create` is connected to and used; setTimeout sets its end', async () => {
  const c = await Sandbox.connect(created, slow)
  assert.equal((await c.commands.run('echo from-agentbox-create')).stdout, 'from-agentbox-create\n')
  const info = await c.getInfo()
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  const before = Date.now()
  await c.setTimeout(20_000)
  const end = (await c.getInfo()).endAt.getTime()
  assert.ok(end >= before + 15_000 && end <= Date.now() + 25_000, `endAt ${new Date(end).toISOString()} is not about 20 s from now`)
})

// --- Pause and resume ------------------------------------------------------

test('betaPause, then Sandbox.connect resumes with memory intact', async () => {
  // Memory only: a tmpfs file and a running process.
  await a.commands.run('mkdir -p /mnt/e2bmem && mount -t tmpfs e2bmem /mnt/e2bmem && echo "$E2B_VALUE" > /mnt/e2bmem/v',
    { user: 'root', envs: { E2B_VALUE: run } })
  const h = await a.commands.run('exec sleep 900', { background: true })

  assert.equal(await a.betaPause(slow), true)
  assert.equal((await Sandbox.getInfo(a.sandboxId)).state, 'paused')

  const r = await Sandbox.connect(a.sandboxId, slow)
  assert.equal((await r.getInfo()).state, 'running')
  assert.equal((await r.commands.run('cat /mnt/e2bmem/v')).stdout, `${run}\n`)
  assert.ok((await r.commands.list()).some((p) => p.pid === h.pid), 'the process started before the pause is gone')
  assert.equal(await r.commands.kill(h.pid), true)
})

// --- Expiry and kill -------------------------------------------------------

test('the sandbox whose timeout passed is gone', async () => {
  await until('the sandbox to expire', async () => {
    try {
      await Sandbox.getInfo(created)
      return false
    } catch (e) {
      if (e instanceof NotFoundError) return true
      throw e
    }
  }, 120_000)
  await assert.rejects(Sandbox.connect(created, slow), NotFoundError)
})

test('kill: true once, then false; the sandbox is gone', async () => {
  assert.equal(await a.kill(), true)
  assert.equal(await Sandbox.kill(a.sandboxId), false)
  await assert.rejects(Sandbox.getInfo(a.sandboxId), NotFoundError)
  await assert.rejects(Sandbox.connect(a.sandboxId, slow), NotFoundError)
  a = undefined
})
