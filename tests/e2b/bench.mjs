// Benchmark of the unmodified E2B SDK against agentbox's E2B front:
//
//   create: Sandbox.create(TEMPLATE) until the first commands.run('true')
//           resolved, BENCH_CREATES times (after one create not counted:
//           it builds a warm template, warms the connection pool);
//   run:    commands.run('true') round trip in one sandbox, BENCH_RUNS
//           times (after 3 not counted).
//
// Prints one JSON line {"create_ms": [...], "run_ms": [...], "sandbox": ID
// of the last one} on stdout; progress on stderr. Every sandbox is
// killed. tests/bench (go run ./tests/bench --e2b) runs it beside the same
// through agentbox's own API; it also runs alone against any front:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=TOKEN \
//     BENCH_TEMPLATE=base BENCH_CREATES=5 BENCH_RUNS=20 node bench.mjs

import { Sandbox } from 'e2b'

const template = process.env.BENCH_TEMPLATE || 'base'
const creates = Number(process.env.BENCH_CREATES || 5)
const runs = Number(process.env.BENCH_RUNS || 20)
const opts = { requestTimeoutMs: 300_000 }

const made = new Set()
async function createRun() {
  const start = performance.now()
  const sb = await Sandbox.create(template, opts)
  made.add(sb.sandboxId)
  const r = await sb.commands.run('true')
  const ms = performance.now() - start
  if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  return { sb, ms }
}

async function kill(sb) {
  await Sandbox.kill(sb.sandboxId)
  made.delete(sb.sandboxId)
}

try {
  const out = { create_ms: [], run_ms: [] }
  await kill((await createRun()).sb)
  let last
  for (let i = 0; i < creates; i++) {
    const { sb, ms } = await createRun()
    out.create_ms.push(ms)
    process.stderr.write(`e2b sdk: create → first run ${i + 1}: ${ms.toFixed(0)} ms\n`)
    if (i < creates - 1) await kill(sb)
    else last = sb
  }
  for (let i = 0; i < runs + 3; i++) {
    const start = performance.now()
    await last.commands.run('true')
    if (i >= 3) out.run_ms.push(performance.now() - start)
  }
  out.sandbox = last.sandboxId
  await kill(last)
  console.log(JSON.stringify(out))
} finally {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
}
