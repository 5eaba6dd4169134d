// The operator console in a real Chromium (Debian's, headless), driven with playwright-core
// against a real `cloudly serve`. tests/console_browser.rs starts the controller, seeds the
// cluster and runs this script; at each `step <name>` line printed here it makes the change the
// step names (a node agent reports ready, a new designation, a route) and answers `ok` on stdin.
//
// Environment: CONSOLE_URL, IDENTITY_FILE (the bootstrap identity), VIEWER_FILE (a viewer's),
// OUTPUT_DIR (screenshots), CHROMIUM (the browser's path), RELAY_SECRETS (the connected relay's
// bearer and token, which no page may show).

import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import readline from 'node:readline';

const { CONSOLE_URL, IDENTITY_FILE, VIEWER_FILE, OUTPUT_DIR, CHROMIUM, RELAY_SECRETS } = process.env;
const input = readline.createInterface({ input: process.stdin });
const answers = input[Symbol.asyncIterator]();
const token = JSON.parse(readFileSync(IDENTITY_FILE, 'utf8')).jwt;

function check(condition, message) {
  if (!condition) { throw new Error(message); }
}

async function step(name) {
  console.log(`step ${name}`);
  const { value } = await answers.next();
  check(value === 'ok', `step ${name} answered ${value}`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(OUTPUT_DIR, `${name}.png`), fullPage: true });
  check(!(await page.content()).includes(token), `the ${name} page shows the identity token`);
  for (const secret of RELAY_SECRETS.split(' ')) {
    check(!(await page.content()).includes(secret), `the ${name} page shows a relay bearer or token`);
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
  return page.evaluate(() => window.consoleTestMarker === true);
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.on('pageerror', (error) => problems.push(`page error: ${error}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().includes('status of 401')) { problems.push(message.text()); }
  });

  // Signed out: the sign-in page, under the strict policy.
  const first = await page.goto(`${CONSOLE_URL}/console`);
  check(first.status() === 401, `signed out, /console answers ${first.status()}`);
  const policy = first.headers()['content-security-policy'] || '';
  check(policy.includes("script-src 'self'") && policy.includes("default-src 'none'"), `policy: ${policy}`);
  check(!policy.includes('unsafe-inline') && !policy.includes('unsafe-eval'), `policy: ${policy}`);

  // Sign in by picking the bootstrap identity file; the cookie is a session id, HttpOnly, Strict.
  const signedIn = await signIn(page, IDENTITY_FILE);
  const setCookie = await signedIn.headerValue('set-cookie');
  check(/^cloudly_console=[0-9a-f]{64};/.test(setCookie), `set-cookie: ${setCookie}`);
  check(setCookie.includes('HttpOnly') && setCookie.includes('SameSite=Strict'), `set-cookie: ${setCookie}`);
  check(!setCookie.includes(token), 'the cookie carries the token');
  const [cookie] = await context.cookies();
  check(cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/console', JSON.stringify(cookie));
  check(await page.evaluate(() => document.cookie) === '', 'the page script can read the session cookie');
  await shot(page, '01-clusters');

  // The cluster: web is converging, db waits on its uncertain volume; then the node agent
  // reports ready and web converges, live.
  await page.click('a[href="/console/clusters/c1"]');
  await page.waitForSelector('tr[data-service="web"] .state');
  await page.waitForFunction(() => document.body.dataset.live === 'open');
  await page.evaluate(() => { window.consoleTestMarker = true; });
  const webState = () => page.textContent('tr[data-service="web"] .state');
  check((await webState()) !== 'converged', 'web converged before its node reported');
  check((await page.textContent('tr[data-service="db"]')).includes('conflict'), 'db waits on its volume');
  await step('converge');
  await page.waitForFunction(
    () => document.querySelector('tr[data-service="web"] .state')?.textContent === 'converged',
    null, { timeout: 10000 });
  check(await sameDocument(page), 'the page was reloaded to show the convergence');

  // A new designation generation appears live, within a second or two.
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
  await page.goto(`${CONSOLE_URL}/console/clusters/c1/nodes/node-1`);
  await page.waitForFunction(() => document.body.dataset.live === 'open');
  await step('route');
  await page.waitForSelector('svg.grants .grant line', { state: 'attached', timeout: 10000 });
  check((await page.textContent('svg.grants')).includes('tcp/443'), 'the graph labels the port');
  check((await page.textContent('#grants')).includes('tcp/443'), 'the grants table names the port');
  await shot(page, '03-node');

  // Volumes: the uncertain claim first, with the command that resolves it.
  await page.goto(`${CONSOLE_URL}/console/clusters/c1/volumes`);
  const command = await page.textContent('tr.uncertain code.command');
  check(command.startsWith('cloudly volume resolve --cluster c1 --id '), `command: ${command}`);
  await shot(page, '04-volumes');

  // Sign out; a viewer signs in and is refused nothing (the console only reads).
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
  await context.clearCookies();
  await context.addCookies([{ name: 'cloudly_console', value: 'ab'.repeat(32), url: `${CONSOLE_URL}/console` }]);
  const forged = await page.goto(`${CONSOLE_URL}/console/clusters/c1`);
  check(forged.status() === 401, `a forged cookie gets ${forged.status()}`);
  check((await page.content()).includes('unknown or has expired'), 'the forged cookie is told why');
  check(!(await page.content()).includes('data-service'), 'a forged cookie sees no service');
  await shot(page, '05-forged-cookie');

  // A page of another site posting a valid identity to the console: refused, no session.
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
  check((await context.cookies()).length === 0, 'a cross-site sign-in made a session');
  await elsewhere.close();

  check(problems.length === 0, `the browser reported: ${problems.join('; ')}`);
  console.log('done');
} finally {
  await browser.close();
  input.close();
}
