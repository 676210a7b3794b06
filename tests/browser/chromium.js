// What the browser scripts share: a deadline for the whole run (a hung
// browser must not hang the Rust test that runs the script), and Debian's
// Chromium started headless in a fresh profile that close() removes.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

// Exits with a failure when the run takes longer than `ms`.
function deadline(script, ms) {
  const killer = setTimeout(() => {
    console.error('[' + script + '] FAILED: no result within ' + ms + ' ms');
    process.exit(1);
  }, ms);
  killer.unref();
}

// A browser context in a fresh profile; `close()` closes it and removes
// the profile.
async function launch(executablePath, options) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'switchyard-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: ARGS,
    ...options,
  });
  const close = async () => {
    await ctx.close().catch(() => {});
    fs.rmSync(userDataDir, { recursive: true, force: true });
  };
  return { ctx, close };
}

module.exports = { deadline, launch };
