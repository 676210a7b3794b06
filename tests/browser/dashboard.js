#!/usr/bin/env node
// Drives Switchyard's admin dashboard in Debian's headless Chromium through
// playwright-core (no browser download: executablePath is /usr/bin/chromium).
// crates/switchyard/tests/dashboard.rs starts the server and the load, then
// runs this script; it can be run by hand against any running instance:
//
//   node tests/browser/dashboard.js --url http://127.0.0.1:9000/dashboard/ \
//     --token ADMIN_TOKEN --pool app --member 127.0.0.1:8081 \
//     [--read-token READ_TOKEN] [--screenshot out.png] [--login-screenshot login.png] \
//     [--min-certificates 1] [--failing-pool stale --failing-member 127.0.0.1:9]
//
// It checks: no console error or page error while the page is used; the
// token prompt, and who the token belongs to; requests/s above zero and
// changing between samples; the charts drawn; the member rows; a click on
// Drain shows the member draining or drained, first from the PATCH answer
// and then from the following samples. With --read-token: a read-only
// token sees the page with every member button disabled. A refused token
// brings the prompt back. With --failing-pool/--failing-member: that member
// (a closed port in a pool without checks) reads `up (no check)` with a
// visible red `failing` badge and its connect failures. No empty band
// under the Pools heading before a message is shown. Last, a kiosk link
// (`#token=...`) signs in without the prompt and leaves the address bar. It prints one JSON line with what it saw
// and exits 0, or prints the failure and exits 1.
'use strict';

const { deadline, launch } = require('./chromium');

const TOKEN_KEY = 'switchyard.dashboard.token';

function parseArgs(argv) {
  const a = {
    chromium: process.env.CHROMIUM || '/usr/bin/chromium',
    minCertificates: 0,
    timeoutMs: 120000,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    const v = argv[i + 1];
    if (v === undefined) throw new Error('no value for ' + k);
    switch (k) {
      case '--url': a.url = v; break;
      case '--token': a.token = v; break;
      case '--read-token': a.readToken = v; break;
      case '--pool': a.pool = v; break;
      case '--member': a.member = v; break;
      case '--screenshot': a.screenshot = v; break;
      case '--login-screenshot': a.loginScreenshot = v; break;
      case '--min-certificates': a.minCertificates = Number(v); break;
      case '--chromium': a.chromium = v; break;
      case '--timeout-ms': a.timeoutMs = Number(v); break;
      case '--failing-pool': a.failingPool = v; break;
      case '--failing-member': a.failingMember = v; break;
      default: throw new Error('unknown argument ' + k);
    }
  }
  for (const k of ['url', 'token', 'pool', 'member']) {
    if (!a[k]) throw new Error('--' + k + ' is required');
  }
  return a;
}

function check(cond, what) {
  if (!cond) throw new Error(what);
}

const log = (...m) => console.error('[dashboard.js]', ...m);

async function main() {
  const a = parseArgs(process.argv.slice(2));
  // The whole run is bounded: a hung browser does not hang the test.
  deadline('dashboard.js', a.timeoutMs);
  const { ctx, close } = await launch(a.chromium, {
    viewport: { width: 1360, height: 900 },
    deviceScaleFactor: 1,
  });
  const result = { console_errors: [] };
  try {
    const page = ctx.pages()[0] || (await ctx.newPage());
    page.setDefaultTimeout(20000);
    const errors = [];
    let watching = true;
    page.on('console', (m) => {
      if (m.type() === 'error' && watching) errors.push('console: ' + m.text());
    });
    page.on('pageerror', (e) => {
      if (watching) errors.push('pageerror: ' + e.message);
    });
    page.on('requestfailed', (r) => {
      // The event stream is aborted on purpose when the page leaves.
      if (watching && !r.url().endsWith('/api/v1/events')) {
        errors.push('requestfailed: ' + r.url() + ' ' + (r.failure() || {}).errorText);
      }
    });

    // 1. A fresh browser: the token prompt.
    log('open', a.url);
    await page.goto(a.url, { waitUntil: 'load' });
    await page.waitForSelector('#login[open]');
    check(await page.isVisible('[data-testid=token]'), 'the token field is visible');
    if (a.loginScreenshot) await page.screenshot({ path: a.loginScreenshot });
    await page.fill('[data-testid=token]', a.token);
    await page.click('[data-testid=login-submit]');
    await page.waitForFunction(() => /\(admin\)$/.test(document.getElementById('who').textContent));
    result.who = await page.textContent('[data-testid=who]');
    check(!(await page.isVisible('#login')), 'the prompt closes after a good token');
    const stored = await page.evaluate((k) => localStorage.getItem(k), TOKEN_KEY);
    check(stored === a.token, 'the token is kept in localStorage');
    log('signed in as', result.who);

    // 2. Live numbers: requests/s above zero, and changing from sample to sample.
    await page.waitForFunction(() => Number(document.getElementById('rps').dataset.value) > 0, null, {
      timeout: 30000,
    });
    const read = () =>
      page.evaluate(() => ({
        rps: Number(document.getElementById('rps').dataset.value),
        shown: document.getElementById('rps').textContent,
        time: Number(document.getElementById('sample-time').dataset.timeMs),
      }));
    const reads = [await read()];
    const until = Date.now() + 20000;
    while (Date.now() < until) {
      const prev = reads[reads.length - 1];
      await page.waitForFunction(
        (t) => Number(document.getElementById('sample-time').dataset.timeMs) > t,
        prev.time,
        { timeout: 5000 }
      );
      reads.push(await read());
      if (reads.length >= 3 && reads.some((r) => r.rps !== reads[0].rps)) break;
    }
    result.rps_reads = reads;
    check(reads.length >= 3, 'three samples seen');
    check(reads.some((r) => r.rps !== reads[0].rps), 'requests/s changes: ' + JSON.stringify(reads));
    check(reads[reads.length - 1].time > reads[0].time, 'the sample time advances');
    check(await page.textContent('#link') === 'live', 'the event stream is live');
    for (const c of ['chart-rps', 'chart-eps', 'chart-latency', 'chart-bandwidth']) {
      const points = Number(await page.getAttribute(`[data-testid=${c}]`, 'data-points'));
      check(points >= 3, c + ' has points: ' + points);
    }
    result.vservers = await page.$$eval('[data-testid=vserver-row]', (rs) => rs.map((r) => r.dataset.vserver));
    check(result.vservers.length >= 1, 'vserver rows');
    result.certificates = await page.$$eval('[data-testid=certificate-row]', (rs) =>
      rs.map((r) => ({ days_left: Number(r.dataset.daysLeft), warn: r.cells[3].classList.contains('warn') }))
    );
    check(result.certificates.length >= a.minCertificates, 'certificate rows: ' + result.certificates.length);
    // The shield's rules, with their hits at accept (no XDP on loopback).
    await page.waitForSelector('[data-testid=shield-rule-row]', { timeout: 15000 });
    result.shield_rules = await page.$$eval('[data-testid=shield-rule-row]', (rs) =>
      rs.map((r) => ({ rule: r.dataset.rule, hits: Number(r.dataset.hits) }))
    );
    result.shield_where = await page.textContent('[data-testid=shield-xdp]');

    // No message yet: the line for one takes no room under "Pools".
    result.action_msg_height = await page.$eval('[data-testid=action-msg]', (e) => e.getBoundingClientRect().height);
    check(result.action_msg_height === 0, 'an empty band under Pools: ' + result.action_msg_height + 'px');

    // A member that refuses connections in a pool without checks.
    if (a.failingPool) {
      const fr = `tr[data-testid=member-row][data-pool="${a.failingPool}"][data-member="${a.failingMember}"]`;
      await page.waitForFunction((sel) => {
        const r = document.querySelector(sel);
        return r && r.dataset.failing === '1';
      }, fr);
      result.failing = await page.$eval(fr, (r) => ({
        label: r.querySelector('[data-testid=member-state]').textContent,
        state: r.dataset.state,
        connect_failures: Number(r.cells[8].textContent),
        connect_failures_red: r.cells[8].classList.contains('bad'),
        fives: r.cells[9].textContent,
      }));
      check(await page.isVisible(`${fr} [data-testid=member-failing]`), 'the failing badge is visible');
      check(result.failing.label === 'up (no check)', 'the failing member reads ' + result.failing.label);
      check(result.failing.connect_failures >= 3 && result.failing.connect_failures_red, 'connect failures shown: ' + JSON.stringify(result.failing));
      const healthy = `tr[data-testid=member-row][data-pool="${a.pool}"][data-member="${a.member}"]`;
      check(!(await page.isVisible(`${healthy} [data-testid=member-failing]`)), 'no failing badge on a member that answers');
    }

    // 3. Members, and a drain from the page.
    const rowSel = `tr[data-testid=member-row][data-pool="${a.pool}"]`;
    result.members = await page.$$eval(rowSel, (rs) => rs.map((r) => ({ address: r.dataset.member, state: r.dataset.state })));
    check(result.members.length >= 2, 'member rows of pool ' + a.pool + ': ' + JSON.stringify(result.members));
    const row = `${rowSel}[data-member="${a.member}"]`;
    check((await page.getAttribute(row, 'data-state')) === 'up', 'the member is up before the drain');
    await page.click(`${row} button[data-testid=drain]`);
    await page.waitForFunction(
      (sel) => ['draining', 'drained'].includes(document.querySelector(sel).dataset.state),
      row
    );
    result.state_after_click = await page.getAttribute(row, 'data-state');
    result.action_message = await page.textContent('[data-testid=action-msg]');
    check(
      (await page.$eval('[data-testid=action-msg]', (e) => e.getBoundingClientRect().height)) > 0,
      'the action message is shown'
    );
    log('after the click:', result.state_after_click, '-', result.action_message);
    // The following samples (not only the PATCH answer) say so too.
    const t0 = (await read()).time;
    await page.waitForFunction(
      (t) => Number(document.getElementById('sample-time').dataset.timeMs) > t + 1500,
      t0,
      { timeout: 10000 }
    );
    result.state_from_samples = await page.getAttribute(row, 'data-state');
    check(
      ['draining', 'drained'].includes(result.state_from_samples),
      'samples after the drain show ' + result.state_from_samples
    );
    check(await page.isDisabled(`${row} button[data-testid=drain]`), 'Drain is disabled on a draining member');
    check(await page.isEnabled(`${row} button[data-testid=enable]`), 'Enable is offered on a draining member');
    if (a.screenshot) {
      await page.screenshot({ path: a.screenshot, fullPage: true });
      result.screenshot = a.screenshot;
    }
    watching = false;
    result.console_errors = errors;
    check(errors.length === 0, 'console or page errors: ' + JSON.stringify(errors));

    // 4. A read-only token: the page works, the buttons are disabled.
    if (a.readToken) {
      await page.evaluate(([k, t]) => localStorage.setItem(k, t), [TOKEN_KEY, a.readToken]);
      await page.reload({ waitUntil: 'load' });
      await page.waitForFunction(() => /\(read\)$/.test(document.getElementById('who').textContent));
      await page.waitForSelector(`${rowSel} button[data-testid=drain]`);
      const enabled = await page.$$eval(`${rowSel} button`, (bs) => bs.filter((b) => !b.disabled).length);
      check(enabled === 0, 'a read-only token gets disabled buttons (' + enabled + ' enabled)');
      result.read_only_buttons_disabled = true;
    }

    // 5. A refused token (a 401) asks again.
    await page.evaluate((k) => localStorage.setItem(k, 'not-a-token-of-this-server'), TOKEN_KEY);
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#login[open]');
    await page.waitForFunction(() => /401/.test(document.getElementById('login-error').textContent));
    result.refused_token_prompt = await page.textContent('[data-testid=login-error]');

    // 6. A kiosk link: the token in the fragment signs in without the
    // prompt, then is gone from the address bar. (about:blank first: a
    // fragment-only change would not load the page again.)
    await page.evaluate((k) => localStorage.removeItem(k), TOKEN_KEY);
    await page.goto('about:blank');
    const kiosk = a.url.split('#')[0] + '#token=' + encodeURIComponent(a.readToken || a.token);
    await page.goto(kiosk, { waitUntil: 'load' });
    await page.waitForFunction(() => /\((read|admin)\)$/.test(document.getElementById('who').textContent));
    check(!(await page.isVisible('#login')), 'no token prompt with a kiosk link');
    result.kiosk_url = await page.evaluate(() => location.href);
    check(!result.kiosk_url.includes('token') && !result.kiosk_url.includes('#'), 'the token left the address bar: ' + result.kiosk_url);
    result.kiosk_who = await page.textContent('[data-testid=who]');
    result.ok = true;
  } finally {
    await close();
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => {
  console.error('[dashboard.js] FAILED: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
