// The operator console in a real Chromium (Debian's, headless), driven with playwright-core
// against a real `cloudly serve`. tests/console_browser.rs starts the controller, seeds the
// cluster and runs this script; at each `step <name>` line printed here it makes the change the
// step names (a node agent reports ready, a new designation, a route) and answers `ok` on stdin.
//
// Environment: CONSOLE_URL, IDENTITY_FILE (the bootstrap identity), VIEWER_FILE (a viewer's),
// OUTPUT_DIR (screenshots), CHROMIUM (the browser's path), RELAY_SECRETS (the connected relay's
// bearer and token, which no page may show), STORY_SECONDS (how long the whole story may take).
//
// Each part of the story is announced as `phase <name>` before it starts, and every browser
// action has a deadline: a story that stalls ends the process with `stuck in phase <name>`
// instead of hanging, so the test names the part that stalled.

import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import readline from 'node:readline';

const { CONSOLE_URL, IDENTITY_FILE, VIEWER_FILE, OUTPUT_DIR, CHROMIUM, RELAY_SECRETS, STORY_SECONDS } = process.env;
/** The longest one browser action may take. */
const ACTION_MS = 20000;
const input = readline.createInterface({ input: process.stdin });
const answers = input[Symbol.asyncIterator]();
const token = JSON.parse(readFileSync(IDENTITY_FILE, 'utf8')).jwt;

function check(condition, message) {
  if (!condition) { throw new Error(message); }
}

let currentPhase = 'launch';
function phase(name) {
  currentPhase = name;
  console.log(`phase ${name}`);
}
const watchdog = setTimeout(() => {
  console.log(`stuck in phase ${currentPhase}`);
  process.exit(3);
}, Number(STORY_SECONDS || 150) * 1000);

/** `promise`, or an error naming `what` once `ms` have passed (for calls with no deadline of their own). */
function within(what, promise, ms = ACTION_MS) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** The page's HTML (`page.content()` has no deadline of its own). */
function contentOf(page) {
  return within('reading the page', page.content());
}

async function step(name) {
  console.log(`step ${name}`);
  const { value } = await within(`the test's answer to step ${name}`, answers.next(), 60000);
  check(value === 'ok', `step ${name} answered ${value}`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(OUTPUT_DIR, `${name}.png`), fullPage: true });
  const content = await contentOf(page);
  check(!content.includes(token), `the ${name} page shows the identity token`);
  for (const secret of RELAY_SECRETS.split(' ')) {
    check(!content.includes(secret), `the ${name} page shows a relay bearer or token`);
  }
}

async function signIn(page, file) {
  await page.setInputFiles('#identity-file', file);
  await page.waitForFunction(() => document.getElementById('identity').value.includes('"jwt"'));
  const [response] = await Promise.all([
    page.waitForResponse((answer) => answer.url().endsWith('/console/sign-in') && answer.request().method() === 'POST'),
    page.click('form.sign-in button[type=submit]'),
  ]);
  await page.waitForURL(`${CONSOLE_URL}/console`);
  return response;
}

async function sameDocument(page) {
  return within('evaluating in the page', page.evaluate(() => window.consoleTestMarker === true));
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], timeout: ACTION_MS });
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(ACTION_MS);
  const page = await context.newPage();
  page.on('pageerror', (error) => problems.push(`page error: ${error}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().includes('status of 401')) { problems.push(message.text()); }
  });

  // Signed out: the sign-in page, under the strict policy.
  phase('signed out');
  const first = await page.goto(`${CONSOLE_URL}/console`);
  check(first.status() === 401, `signed out, /console answers ${first.status()}`);
  const policy = first.headers()['content-security-policy'] || '';
  check(policy.includes("script-src 'self'") && policy.includes("default-src 'none'"), `policy: ${policy}`);
  check(!policy.includes('unsafe-inline') && !policy.includes('unsafe-eval'), `policy: ${policy}`);

  // Sign in by picking the bootstrap identity file; the cookie is a session id, HttpOnly, Strict.
  phase('sign in');
  const signedIn = await signIn(page, IDENTITY_FILE);
  const setCookie = await signedIn.headerValue('set-cookie');
  check(/^cloudly_console=[0-9a-f]{64};/.test(setCookie), `set-cookie: ${setCookie}`);
  check(setCookie.includes('HttpOnly') && setCookie.includes('SameSite=Strict'), `set-cookie: ${setCookie}`);
  check(!setCookie.includes(token), 'the cookie carries the token');
  const [cookie] = await within('reading the cookies', context.cookies());
  check(cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/console', JSON.stringify(cookie));
  check(await within('evaluating in the page', page.evaluate(() => document.cookie)) === '',
    'the page script can read the session cookie');
  await shot(page, '01-clusters');

  // The cluster: web is converging, db waits on its uncertain volume; then the node agent
  // reports ready and web converges, live.
  phase('cluster');
  await page.click('a[href="/console/clusters/c1"]');
  await page.waitForSelector('tr[data-service="web"] .state');
  await page.waitForFunction(() => document.body.dataset.live === 'open');
  await within('evaluating in the page', page.evaluate(() => { window.consoleTestMarker = true; }));
  const webState = () => page.textContent('tr[data-service="web"] .state');
  check((await webState()) !== 'converged', 'web converged before its node reported');
  check((await page.textContent('tr[data-service="db"]')).includes('conflict'), 'db waits on its volume');
  await step('converge');
  await page.waitForFunction(
    () => document.querySelector('tr[data-service="web"] .state')?.textContent === 'converged',
    null, { timeout: 10000 });
  check(await sameDocument(page), 'the page was reloaded to show the convergence');

  // A new designation generation appears live, within a second or two.
  phase('designation');
  check((await page.textContent('#designation-current .generation')) === '1', 'generation 1 first');
  const designated = Date.now();
  await step('designate');
  await page.waitForFunction(
    () => document.querySelector('#designation-current .generation')?.textContent === '2',
    null, { timeout: 5000 });
  const latency = Date.now() - designated;
  console.log(`designation generation 2 shown ${latency} ms after it was written`);
  check(latency < 2000, `the new designation took ${latency} ms to appear`);
  check(await sameDocument(page), 'the page was reloaded to show the designation');
  check((await page.textContent('#relays tr[data-relay="relay-1"]')).includes('generation 1'), 'the relays table lists relay-1');
  await shot(page, '02-cluster');

  // The node: once a route is put, the grants graph shows what the ingress may reach.
  phase('node');
  await page.goto(`${CONSOLE_URL}/console/clusters/c1/nodes/node-1`);
  await page.waitForFunction(() => document.body.dataset.live === 'open');
  await step('route');
  await page.waitForSelector('svg.grants .grant line', { state: 'attached', timeout: 10000 });
  check((await page.textContent('svg.grants')).includes('tcp/443'), 'the graph labels the port');
  check((await page.textContent('#grants')).includes('tcp/443'), 'the grants table names the port');
  await shot(page, '03-node');

  // Volumes: the uncertain claim first, with the command that resolves it.
  phase('volumes');
  await page.goto(`${CONSOLE_URL}/console/clusters/c1/volumes`);
  const command = await page.textContent('tr.uncertain code.command');
  check(command.startsWith('cloudly volume resolve --cluster c1 --id '), `command: ${command}`);
  await shot(page, '04-volumes');

  // Sign out; a viewer signs in and is refused nothing (the console only reads).
  phase('viewer');
  await page.click('header form.sign-out button');
  await page.waitForURL(`${CONSOLE_URL}/console/sign-in`);
  await signIn(page, VIEWER_FILE);
  for (const path of ['/console/clusters/c1', '/console/clusters/c1/nodes/node-1', '/console/clusters/c1/volumes',
    '/console/clusters/c1/services/web']) {
    const answer = await page.goto(`${CONSOLE_URL}${path}`);
    check(answer.status() === 200, `a viewer reads ${path}: ${answer.status()}`);
  }
  check((await page.textContent('header .operator')).includes('viewer'), 'the header names the viewer');
  check((await page.textContent('#assignments')).includes('node-1'), 'the service page lists its assignments per node');
  await shot(page, '06-service-as-viewer');

  // A forged cookie: the sign-in page, nothing shown.
  phase('forged cookie');
  await context.clearCookies();
  await context.addCookies([{ name: 'cloudly_console', value: 'ab'.repeat(32), url: `${CONSOLE_URL}/console` }]);
  const forged = await page.goto(`${CONSOLE_URL}/console/clusters/c1`);
  check(forged.status() === 401, `a forged cookie gets ${forged.status()}`);
  const forgedPage = await contentOf(page);
  check(forgedPage.includes('unknown or has expired'), 'the forged cookie is told why');
  check(!forgedPage.includes('data-service'), 'a forged cookie sees no service');
  await shot(page, '05-forged-cookie');

  // A page of another site posting a valid identity to the console: refused, no session.
  phase('cross-site sign-in');
  await context.clearCookies();
  const elsewhere = await context.newPage();
  await elsewhere.setContent(`<form method="post" action="${CONSOLE_URL}/console/sign-in">
    <input name="identity"><button type="submit">go</button></form>`);
  await elsewhere.fill('input[name=identity]', readFileSync(IDENTITY_FILE, 'utf8'));
  const [crossSite] = await Promise.all([
    elsewhere.waitForResponse((answer) => answer.url().endsWith('/console/sign-in')),
    elsewhere.click('button'),
  ]);
  check(crossSite.status() === 403, `a cross-site sign-in gets ${crossSite.status()}`);
  check((await within('reading the cookies', context.cookies())).length === 0, 'a cross-site sign-in made a session');
  await elsewhere.close();

  check(problems.length === 0, `the browser reported: ${problems.join('; ')}`);
  console.log('done');
} finally {
  clearTimeout(watchdog);
  await within('closing the browser', browser.close()).catch((error) => console.error(`${error}`));
  input.close();
}
// Whatever the browser left behind, the story is over.
process.exit(0);
