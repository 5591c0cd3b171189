// A headless Chromium (Debian's /usr/bin/chromium, driven by puppeteer-core) that the
// integration tests steer one JSON command per stdin line; one JSON answer per stdout line:
//   {"cmd":"init","js":SRC}                         run SRC in every page before its scripts
//   {"cmd":"open","url":U,"width":W,"height":H}     load U (viewport W x H)
//   {"cmd":"wait","js":EXPR,"timeout":MS}           poll EXPR in the page until truthy → value
//   {"cmd":"eval","js":EXPR}                        → value of EXPR in the page
//   {"cmd":"type","selector":S,"text":T}            type T into S
//   {"cmd":"click","selector":S}
//   {"cmd":"screenshot","path":P}                   full-page PNG
//   {"cmd":"log"}                                   → the page's console errors and exceptions
//   {"cmd":"quit"}
// Answers: {"ok":true,"value":...} or {"ok":false,"error":"..."}.
import puppeteer from 'puppeteer-core';
import readline from 'node:readline';

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
    '--disable-background-networking', '--disable-component-update'],
});
const page = await browser.newPage();
const log = [];
page.on('console', (m) => {
  // a failed fetch is logged below with its URL
  if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) log.push(`console: ${m.text()}`);
});
page.on('response', (r) => { if (r.status() >= 400) log.push(`http ${r.status()}: ${new URL(r.url()).pathname}`); });
page.on('pageerror', (e) => log.push(`exception: ${e.message}`));

const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');

async function run(c) {
  switch (c.cmd) {
    case 'init':
      await page.evaluateOnNewDocument(c.js);
      return null;
    case 'open':
      await page.setViewport({ width: c.width || 1200, height: c.height || 900 });
      await page.goto(c.url, { waitUntil: 'domcontentloaded', timeout: c.timeout || 30000 });
      return null;
    case 'wait': {
      const h = await page.waitForFunction(c.js, { timeout: c.timeout || 30000, polling: 100 });
      return await h.jsonValue();
    }
    case 'eval':
      return await page.evaluate(c.js);
    case 'type':
      await page.type(c.selector, c.text);
      return null;
    case 'click':
      await page.click(c.selector);
      return null;
    case 'screenshot':
      await page.screenshot({ path: c.path, fullPage: true });
      return c.path;
    case 'log':
      return log;
    default:
      throw new Error(`unknown command ${c.cmd}`);
  }
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let c;
  try { c = JSON.parse(line); } catch (e) { say({ ok: false, error: `bad command: ${e}` }); continue; }
  if (c.cmd === 'quit') break;
  try { say({ ok: true, value: await run(c) }); } catch (e) { say({ ok: false, error: String(e && e.message || e) }); }
}
await browser.close();
