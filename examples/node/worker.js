#!/usr/bin/env node
// A Shoal worker in Node.js, no packages needed (Node 18+: global fetch).
//
// HTTP mode (default): follows the member's slice on the sidecar's local JSON API
// (worker/openapi.yaml), keeps one "job runner" per owned job, and acknowledges each
// slice once it follows it. Run the sidecar without --ack-on-apply, so that the
// controller grants a job elsewhere only after this process has let go of it.
//
//     SHOAL_API=http://127.0.0.1:8765 node worker.js
//
// Exec mode: the sidecar starts one process per job (`--exec 'exec node worker.js'`) with
// SHOAL_JOB and SHOAL_MEMBER set, stops it with SIGTERM when the job moves, and
// acknowledges by itself.
//
// Each line it prints is `<member> start|stop|ack ...`.

'use strict';

const API = (process.env.SHOAL_API || 'http://127.0.0.1:8765').replace(/\/$/, '');
const LONG_POLL_SECONDS = 30;

const log = (text) => process.stdout.write(text + '\n');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function runOneJob(job, member) {
  // Exec mode: this process is the job; run until the sidecar stops it.
  log(`${member} start ${job}`);
  const work = setInterval(() => {}, 100); // the real work for `job` goes here
  process.on('SIGTERM', () => {
    clearInterval(work);
    log(`${member} stop ${job}`);
    process.exit(0);
  });
}

async function getSlice(held) {
  // The slice; with `held` (a slice hash), once the delivered one is another (or the
  // long poll ends). An instance change keeps the revision and changes the hash, so
  // the hash, not the revision, says whether anything changed.
  let path = '/v1/slice';
  if (held !== null) {
    path += `?waitForChangeFrom=${encodeURIComponent(held)}&timeoutSeconds=${LONG_POLL_SECONDS}`;
  }
  const reply = await fetch(API + path, { signal: AbortSignal.timeout((LONG_POLL_SECONDS + 10) * 1000) });
  if (reply.status === 404) return null; // no slice delivered yet
  if (!reply.ok) throw new Error(`GET ${path}: ${reply.status} ${await reply.text()}`);
  return reply.json();
}

async function acknowledge(revision, hash) {
  // 'acked'; or 'not needed' (409: the sidecar acknowledges by itself, or a newer
  // slice came, which the next poll brings); or null to try again (503: fenced).
  const reply = await fetch(API + '/v1/ack', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ revision, hash }),
  });
  if (reply.ok) return 'acked';
  const reason = await reply.text();
  if (reply.status === 409) {
    log(`ack of revision ${revision} not needed: ${reply.status} ${reason}`);
    return 'not needed';
  }
  log(`ack of revision ${revision} refused: ${reply.status} ${reason}`);
  await sleep(500);
  return null;
}

async function followSlices() {
  // HTTP mode: run exactly the jobs of the delivered slice, acknowledge each slice
  // once, by revision and hash.
  let running = new Set();
  let handled = null; // hash of the last slice followed and acknowledged
  for (;;) {
    let current;
    try {
      current = await getSlice(handled);
    } catch (error) {
      log(`the sidecar is not reachable yet (${error.message}); retrying`);
      await sleep(1000);
      continue;
    }
    if (current === null) {
      await sleep(500);
      continue;
    }
    const member = current.member;
    const wanted = new Set(current.fenced ? [] : current.jobs);
    // Stop first, then start: a job leaves this member before the ack lets it go elsewhere.
    for (const job of [...running].filter((job) => !wanted.has(job)).sort()) log(`${member} stop ${job}`);
    for (const job of [...wanted].filter((job) => !running.has(job)).sort()) log(`${member} start ${job}`);
    running = wanted;
    if (current.fenced) {
      await sleep(500);
      continue;
    }
    if (current.hash === handled) continue;
    const outcome = await acknowledge(current.revision, current.hash);
    if (outcome !== null) handled = current.hash;
    if (outcome === 'acked') log(`${member} ack ${current.revision} ${[...running].sort().join(' ')}`);
  }
}

if (process.env.SHOAL_JOB) {
  runOneJob(process.env.SHOAL_JOB, process.env.SHOAL_MEMBER || '?');
} else {
  process.on('SIGTERM', () => process.exit(0));
  followSlices();
}
