#!/usr/bin/env node
// Opens the dashboard of a cluster node in Debian's headless Chromium
// (playwright-core) and reads its Cluster section: every node's row, its
// revision and its last error. crates/switchyard/tests/cluster.rs runs it:
//
//   node tests/browser/cluster.js --url http://127.0.0.1:9090/dashboard/ --nodes 2
//
// The admin listener has no tokens file: the empty token signs in. Prints
// one JSON line with the rows and exits 0, or prints the failure and
// exits 1 (no console error may happen meanwhile).
'use strict';

const { deadline, launch } = require('./chromium');

function parseArgs(argv) {
  const a = { chromium: process.env.CHROMIUM || '/usr/bin/chromium', nodes: 1, timeoutMs: 60000 };
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (v === undefined) throw new Error('no value for ' + k);
    if (k === '--url') a.url = v;
    else if (k === '--nodes') a.nodes = Number(v);
    else if (k === '--chromium') a.chromium = v;
    else throw new Error('unknown argument ' + k);
  }
  if (!a.url) throw new Error('--url is required');
  return a;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  deadline('cluster.js', a.timeoutMs);
  const { ctx, close } = await launch(a.chromium);
  try {
    const page = ctx.pages()[0] || (await ctx.newPage());
    page.setDefaultTimeout(20000);
    const errors = [];
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push('console: ' + m.text());
    });
    page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
    await page.goto(a.url, { waitUntil: 'load' });
    await page.waitForSelector('#login[open]');
    await page.fill('[data-testid=token]', '');
    await page.click('[data-testid=login-submit]');
    await page.waitForFunction(
      (n) => document.querySelectorAll('[data-testid=cluster-row]').length >= n,
      a.nodes
    );
    const rows = await page.$$eval('[data-testid=cluster-row]', (trs) =>
      trs.map((tr) => Array.from(tr.cells).map((c) => c.textContent))
    );
    const prefix = await page.textContent('[data-testid=cluster-prefix]');
    if (errors.length) throw new Error(errors.join('; '));
    console.log(JSON.stringify({ prefix, rows }));
  } finally {
    await close();
  }
}

main().catch((e) => {
  console.error('[cluster.js] FAILED: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
