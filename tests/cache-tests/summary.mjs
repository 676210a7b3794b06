// Summary, regression gate and report of an http-tests/cache-tests run.
//
//   node summary.mjs --suite DIR --results FILE [--label NAME]
//                    [--baseline FILE [--check | --update [--doc FILE]]]
//   node summary.mjs --suite DIR --published
//
// DIR is a copy of the suite (tests/, test-engine/, results/); FILE is the raw
// JSON the suite's CLI prints ({ test id: true | [error name, message] }).
//
// Counting follows cache-tests.fyi so the figures compare with the published
// ones: every test of the suite is classed by its `kind` (absent: required);
// a test passes when the suite's own determineTestResult() says pass (or, for
// `check` tests, yes) with dependencies NOT honoured; the denominator is every
// test of that kind in the suite, including the browser-only ones a reverse
// proxy run never executes. With this, results/*.json give required 141
// (httpd), 138 (Squid, Varnish, caddy), 136 (ATS), 126 (HAProxy), 115 (nginx)
// of 163 and optimal 74 (ATS), 69 (httpd), 66 (nginx) of 107.
//
// --check exits 1 when a required test of the baseline no longer passes (an
// optimal one only warns) and lists the tests that pass now and did not then.
// --update rewrites the baseline and, with --doc, the markdown report.

import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const KINDS = ['required', 'optimal', 'check']

function parseArgs (argv) {
  const opts = { label: 'switchyard' }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    const value = () => {
      if (i + 1 >= argv.length) die(`${a} needs a value`)
      return argv[++i]
    }
    switch (a) {
      case '--suite': opts.suite = value(); break
      case '--results': opts.results = value(); break
      case '--label': opts.label = value(); break
      case '--baseline': opts.baseline = value(); break
      case '--doc': opts.doc = value(); break
      case '--check': opts.check = true; break
      case '--update': opts.update = true; break
      case '--published': opts.published = true; break
      default: die(`unknown argument ${a}`)
    }
  }
  if (!opts.suite) die('--suite DIR is required')
  if (!opts.published && !opts.results) die('--results FILE is required')
  if ((opts.check || opts.update) && !opts.baseline) die('--check and --update need --baseline FILE')
  return opts
}

function die (msg) {
  console.error(`summary.mjs: ${msg}`)
  process.exit(2)
}

const opts = parseArgs(process.argv.slice(2))
const suiteDir = path.resolve(opts.suite)
const load = rel => import(pathToFileURL(path.join(suiteDir, rel)).href)

const testSuites = (await load('tests/index.mjs')).default
const { determineTestResult, resultTypes } = await load('test-engine/lib/results.mjs')
const suitePkg = JSON.parse(fs.readFileSync(path.join(suiteDir, 'package.json'), 'utf8'))
const suiteVersion = `${suitePkg.name} ${suitePkg.version}`

// Every test, in suite order, with its class.
const allTests = []
for (const suite of testSuites) {
  for (const test of suite.tests) {
    const kind = test.kind === undefined ? 'required' : test.kind
    if (!KINDS.includes(kind)) die(`test ${test.id}: unknown kind ${kind}`)
    allTests.push({ id: test.id, name: test.name, kind, suite: suite.name, browserOnly: test.browser_only === true })
  }
}

const typeName = symbol => Object.keys(resultTypes).find(k => resultTypes[k] === symbol)
const PASS = new Set(['pass', 'yes'])

// Classifies one result set: per kind, passed / total and the tests that did not pass.
function score (results) {
  const out = {}
  for (const k of KINDS) out[k] = { passed: [], total: 0, notPassed: [], untested: 0 }
  for (const t of allTests) {
    const o = out[t.kind]
    o.total++
    const type = typeName(determineTestResult(testSuites, t.id, results, false))
    if (PASS.has(type)) {
      o.passed.push(t.id)
    } else if (type === 'untested' && t.browserOnly) {
      o.untested++ // a reverse proxy run never executes these; still counted in the total, as published
    } else {
      const raw = results[t.id]
      const detail = raw === undefined ? 'not run' : Array.isArray(raw) ? `${raw[0]}: ${raw[1]}` : String(raw)
      o.notPassed.push({ ...t, type, detail })
    }
  }
  return out
}

function scoreLines (s) {
  return KINDS.map(k => `${k.padEnd(9)} ${String(s[k].passed.length).padStart(3)} passed of ${s[k].total}`)
}

function publishedScores () {
  const dir = path.join(suiteDir, 'results')
  let index = []
  try {
    index = fs.readdirSync(dir).filter(f => f.endsWith('.json')).map(f => ({ file: f, name: f.replace(/\.json$/, '') }))
  } catch (e) {
    return []
  }
  return index.map(item => {
    const results = JSON.parse(fs.readFileSync(path.join(dir, item.file), 'utf8'))
    return { ...item, score: score(results) }
  })
}

async function publishedIndex () {
  try {
    return (await load('results/index.mjs')).default
  } catch (e) {
    return []
  }
}

async function publishedTable () {
  const idx = await publishedIndex()
  const rows = publishedScores().map(p => {
    const meta = idx.find(i => i.file === p.file) || {}
    return { name: meta.name || p.name, type: meta.type || '?', version: meta.version || '?', file: p.file, score: p.score }
  })
  const order = { 'rev-proxy': 0, cdn: 1, browser: 2 }
  rows.sort((a, b) => (order[a.type] ?? 3) - (order[b.type] ?? 3) ||
    b.score.required.passed.length - a.score.required.passed.length ||
    b.score.optimal.passed.length - a.score.optimal.passed.length)
  return rows
}

if (opts.published) {
  const rows = await publishedTable()
  console.log(`published results of ${suiteVersion} (counted as cache-tests.fyi does)`)
  console.log('name            type       required  optimal   check')
  for (const r of rows) {
    const f = k => `${r.score[k].passed.length}/${r.score[k].total}`.padEnd(10)
    console.log(`${r.name.padEnd(15)} ${r.type.padEnd(10)} ${f('required')}${f('optimal')}${f('check')}`)
  }
  process.exit(0)
}

const results = JSON.parse(fs.readFileSync(opts.results, 'utf8'))
const known = new Set(allTests.map(t => t.id))
const unknown = Object.keys(results).filter(id => !known.has(id))
const s = score(results)

console.log(`== cache-tests: ${opts.label} (${suiteVersion}, ${Object.keys(results).length} results)`)
for (const line of scoreLines(s)) console.log(line)
console.log(`(totals include ${s.required.untested + s.optimal.untested + s.check.untested} browser-only tests a reverse proxy is never given; counted as cache-tests.fyi does)`)
if (unknown.length) console.log(`warning: ${unknown.length} results for ids the suite does not define: ${unknown.join(' ')}`)
for (const k of ['required', 'optimal']) {
  console.log(`\nNot passing, ${k} (${s[k].notPassed.length}):`)
  for (const t of s[k].notPassed) {
    console.log(`  ${t.id.padEnd(40)} ${t.type.padEnd(15)} ${t.name}`)
  }
}

let status = 0
if (opts.check) {
  let base
  try {
    base = JSON.parse(fs.readFileSync(opts.baseline, 'utf8'))
  } catch (e) {
    die(`cannot read baseline ${opts.baseline}: ${e.message}`)
  }
  console.log(`\n== regression check against ${opts.baseline} (${base.generated || 'undated'})`)
  for (const k of ['required', 'optimal']) {
    const before = new Set(base[k] || [])
    const now = new Set(s[k].passed)
    const lost = [...before].filter(id => !now.has(id))
    const gained = [...now].filter(id => !before.has(id))
    const byId = id => allTests.find(t => t.id === id)
    for (const id of lost) {
      const t = byId(id)
      const np = s[k].notPassed.find(x => x.id === id)
      console.log(`${k === 'required' ? 'REGRESSION' : 'warning: no longer passes'} (${k}) ${id}: ${t ? t.name : '(no longer in the suite)'}${np ? ` [${np.type}: ${np.detail}]` : ''}`)
    }
    for (const id of gained) console.log(`newly passing (${k}) ${id}: ${byId(id).name}`)
    console.log(`${k}: ${before.size} in the baseline, ${now.size} pass now, ${lost.length} lost, ${gained.length} gained`)
    if (k === 'required' && lost.length) status = 1
  }
  if (status) console.log('\nFAIL: required tests of the baseline no longer pass')
  else console.log('\nOK: every required test of the baseline passes (run with --update to record newly passing ones)')
}

if (opts.update) {
  const today = new Date().toISOString().slice(0, 10)
  const baseline = {
    comment: 'Tests of http-tests/cache-tests that Switchyard passed when this was recorded; scripts/cache-tests.sh --check fails when a required one no longer passes. Rewritten by scripts/cache-tests.sh --update.',
    suite: suiteVersion,
    generated: today,
    score: Object.fromEntries(KINDS.map(k => [k, `${s[k].passed.length}/${s[k].total}`])),
    required: [...s.required.passed].sort(),
    optimal: [...s.optimal.passed].sort()
  }
  fs.writeFileSync(opts.baseline, JSON.stringify(baseline, null, 2) + '\n')
  console.log(`\nwrote ${opts.baseline}`)
  if (opts.doc) {
    fs.writeFileSync(opts.doc, await renderDoc(today, s))
    console.log(`wrote ${opts.doc}`)
  }
}

process.exit(status)

async function renderDoc (today, s) {
  const md = x => String(x).replace(/\|/g, '\\|').replace(/\n/g, ' ')
  const rows = await publishedTable()
  const L = []
  L.push('# HTTP cache conformance (cache-tests)')
  L.push('')
  L.push('<!-- Generated by `scripts/cache-tests.sh --update`; do not edit by hand. -->')
  L.push('')
  L.push(`Switchyard against the [HTTP cache test suite](https://github.com/http-tests/cache-tests) (${suiteVersion}, BSD-3-Clause; results at [cache-tests.fyi](https://cache-tests.fyi)), run on ${today} by \`scripts/cache-tests.sh\`: the suite's origin server on a loopback port, \`target/debug/switchyard\` in front of it with \`scripts/cache-tests/switchyard.toml\`, the suite's CLI client sending every test through the proxy.`)
  L.push('')
  L.push('## Score')
  L.push('')
  L.push('```')
  for (const line of scoreLines(s)) L.push(line)
  L.push('```')
  L.push('')
  L.push('Counted as cache-tests.fyi counts: a test is in the class its `kind` says (none: required); it passes when the suite says pass (`check` tests: yes), dependencies not honoured; each total is every test of that class in the suite, including the ' +
    `${s.required.untested + s.optimal.untested + s.check.untested} browser-only tests that a reverse proxy is never given (so a proxy can reach at most ${s.required.total - s.required.untested} required and ${s.optimal.total - s.optimal.untested} optimal). \`check\` tests record a behaviour and are neither pass nor fail.`)
  L.push('')
  L.push('`tests/cache-tests/baseline.json` lists the required and optimal tests passed here; `scripts/cache-tests.sh --check` fails when a required one of them no longer passes.')
  L.push('')
  L.push('## Published results, for comparison')
  L.push('')
  L.push('The suite\'s `results/` directory, counted the same way:')
  L.push('')
  L.push('| implementation | type | version | required | optimal | check |')
  L.push('|---|---|---|---|---|---|')
  L.push(`| **Switchyard** | rev-proxy | this tree | **${s.required.passed.length}/${s.required.total}** | **${s.optimal.passed.length}/${s.optimal.total}** | ${s.check.passed.length}/${s.check.total} |`)
  for (const r of rows) {
    L.push(`| ${md(r.name)} | ${r.type} | ${md(r.version)} | ${r.score.required.passed.length}/${r.score.required.total} | ${r.score.optimal.passed.length}/${r.score.optimal.total} | ${r.score.check.passed.length}/${r.score.check.total} |`)
  }
  L.push('')
  for (const k of ['required', 'optimal']) {
    L.push(`## Failing ${k} tests (${s[k].notPassed.length})`)
    L.push('')
    if (s[k].notPassed.length === 0) {
      L.push('None.')
      L.push('')
      continue
    }
    L.push('Result: `fail` (or `optional_fail`) is a failed assertion; `setup_fail` means the test\'s precondition did not hold (typically: the response was not cached at all); `retry` means the cache retried a request; `harness_fail` an abort or timeout.')
    L.push('')
    L.push('| id | section | test | result | detail |')
    L.push('|---|---|---|---|---|')
    for (const t of s[k].notPassed) {
      L.push(`| \`${t.id}\` | ${md(t.suite)} | ${md(t.name)} | ${t.type} | ${md(t.detail)} |`)
    }
    L.push('')
  }
  L.push('## Notes')
  L.push('')
  L.push('- When a test expects the cache to revalidate (`expected_type: *_validated`) and the request reaching the origin is not conditional, the origin answers `999 304 Not Generated`. Switchyard rejects a status outside 100..599 (RFC 9110 §15) and answers `502`, logging "status code out of range"; other proxies may pass the 999 through. The test is a setup failure either way.')
  L.push('- Sanity check of the harness: `--peer nginx` with Debian nginx 1.22.1 and `scripts/cache-tests/nginx.conf` (plain `proxy_cache`, `proxy_cache_revalidate on`) scored 116/163 required and 65/107 optimal when the harness was written, against the published 115 and 66 of nginx 1.28 (differences: `headers-store-Transfer-Encoding`, `freshness-max-age-s-maxage-shared-shorter-expires`).')
  L.push('- Test names come from the suite; some tests classed `required` are worded "An optimal ..." (e.g. `freshness-s-maxage-shared`). The class, not the wording, decides how they count.')
  L.push('')
  L.push('## Running')
  L.push('')
  L.push('```sh')
  L.push('cargo build -p switchyard')
  L.push('scripts/cache-tests.sh            # run, print the score and the failures; raw JSON in target/cache-tests/results.json')
  L.push('scripts/cache-tests.sh --check    # ... and fail if a required test of the baseline no longer passes')
  L.push('scripts/cache-tests.sh --update   # ... and rewrite tests/cache-tests/baseline.json and this file')
  L.push('scripts/cache-tests.sh --id freshness-max-age   # one test, with the requests and responses')
  L.push('scripts/cache-tests.sh --peer nginx             # the same run against nginx proxy_cache (sanity check)')
  L.push('```')
  L.push('')
  L.push('Needs node >= 20.18.1 with npm (the suite\'s only runtime dependency, undici, is pinned in `tests/cache-tests/package-lock.json` and installed with `npm ci` into `target/cache-tests/`); the suite is read from `../shared/cache-tests` (`CACHE_TESTS_DIR` overrides) and copied to `target/cache-tests/suite`.')
  L.push('')
  return L.join('\n')
}
